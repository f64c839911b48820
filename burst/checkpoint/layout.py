"""Where each array sits in the host buffer, and how the buffer is cut into chunks.

Arrays are laid out one after another, each starting on a 64-byte boundary. Chunks never cut
an array except a large one, which is cut at fixed offsets from its own start: small arrays
that follow each other share a chunk up to ``chunk_size``; an array of ``chunk_size`` or more
starts a new chunk and is split into ``chunk_size`` pieces. A frozen layer therefore yields
the same chunk bytes save after save, and its chunks are not uploaded again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from burst.errors import CheckpointError

ALIGN = 64
DEFAULT_CHUNK_SIZE = 8 << 20


@dataclass(frozen=True)
class ArrayEntry:
    kind: str  # "torch" or "numpy"
    dtype: str  # torch dtype name without "torch." or numpy dtype str
    shape: tuple[int, ...]
    offset: int
    nbytes: int

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> ArrayEntry:
        return ArrayEntry(
            kind=str(d["kind"]),
            dtype=str(d["dtype"]),
            shape=tuple(int(s) for s in d["shape"]),
            offset=int(d["offset"]),
            nbytes=int(d["nbytes"]),
        )


@dataclass(frozen=True)
class ChunkSpan:
    offset: int
    size: int


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def describe(arrays: list[Any]) -> list[tuple[str, str, tuple[int, ...], int]]:
    """(kind, dtype, shape, nbytes) of each array, without touching its data."""
    out = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            out.append(("numpy", a.dtype.str, tuple(a.shape), int(a.nbytes)))
        else:
            nbytes = a.numel() * a.element_size()
            out.append(("torch", str(a.dtype).removeprefix("torch."), tuple(a.shape), nbytes))
    return out


def build_layout(arrays: list[Any]) -> tuple[list[ArrayEntry], int]:
    entries: list[ArrayEntry] = []
    pos = 0
    for kind, dtype, shape, nbytes in describe(arrays):
        pos = _align(pos)
        entries.append(ArrayEntry(kind, dtype, shape, pos, nbytes))
        pos += nbytes
    return entries, _align(pos)


def layout_signature(entries: list[ArrayEntry], chunk_size: int) -> str:
    doc = json.dumps([chunk_size, [e.to_json() for e in entries]], separators=(",", ":"))
    return hashlib.sha256(doc.encode()).hexdigest()[:32]


def plan_chunks(entries: list[ArrayEntry], chunk_size: int) -> list[ChunkSpan]:
    if chunk_size < ALIGN or chunk_size % ALIGN:
        raise CheckpointError(f"chunk_size {chunk_size} must be a positive multiple of {ALIGN}")
    spans: list[ChunkSpan] = []
    start: int | None = None
    end = 0
    for e in entries:
        if e.nbytes == 0:
            continue
        if e.nbytes >= chunk_size:
            if start is not None:
                spans.append(ChunkSpan(start, end - start))
                start = None
            for off in range(0, e.nbytes, chunk_size):
                spans.append(ChunkSpan(e.offset + off, min(chunk_size, e.nbytes - off)))
            continue
        if start is not None and e.offset + e.nbytes - start > chunk_size:
            spans.append(ChunkSpan(start, end - start))
            start = None
        if start is None:
            start = e.offset
        end = e.offset + e.nbytes
    if start is not None:
        spans.append(ChunkSpan(start, end - start))
    return spans


def segments(
    span: ChunkSpan, entries: list[ArrayEntry], first: int = 0
) -> list[tuple[int, int, int, int]]:
    """(entry index, offset in entry, offset in chunk, length) pieces of one chunk."""
    out = []
    lo, hi = span.offset, span.offset + span.size
    for i in range(first, len(entries)):
        e = entries[i]
        if e.offset >= hi:
            break
        a, b = max(lo, e.offset), min(hi, e.offset + e.nbytes)
        if a < b:
            out.append((i, a - e.offset, a - lo, b - a))
    return out
