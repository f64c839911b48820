"""Where each array sits in the host buffer, and how the buffer is cut into chunks.

Each array starts on a 64-byte boundary. A large array (at least ``chunk_size / 16``) gets
chunks of its own, cut at fixed offsets from its start (``chunk_size`` each, the last one
shorter). Small arrays (biases, norms, step counters, RNG states) are laid out after all the
large ones and packed together, whole, into chunks of up to ``chunk_size``, so they do not
cost one object each. No chunk ever holds part of two large arrays: a frozen layer yields the
same chunk bytes save after save, and its chunks are not uploaded again.
"""

from __future__ import annotations

import bisect
import hashlib
import json
from dataclasses import dataclass
from typing import Any

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
        # by hand: dataclasses.asdict deep-copies, ~10 ms per save of a 200-array state
        return {
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "offset": self.offset,
            "nbytes": self.nbytes,
        }

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
    import numpy as np  # here, not at import: the checkpoint worker never needs numpy

    out = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            out.append(("numpy", a.dtype.str, tuple(a.shape), int(a.nbytes)))
        else:
            nbytes = a.numel() * a.element_size()
            out.append(("torch", str(a.dtype).removeprefix("torch."), tuple(a.shape), nbytes))
    return out


def small_limit(chunk_size: int) -> int:
    """Arrays below this many bytes are packed together with other small ones."""
    return max(ALIGN, chunk_size // 16)


def build_layout(
    arrays: list[Any], chunk_size: int = DEFAULT_CHUNK_SIZE
) -> tuple[list[ArrayEntry], int]:
    """Entries in the arrays' order; large arrays placed first, then the small ones."""
    described = describe(arrays)
    limit = small_limit(chunk_size)
    order = [i for i, d in enumerate(described) if d[3] >= limit]
    order += [i for i, d in enumerate(described) if d[3] < limit]
    offsets = [0] * len(described)
    pos = 0
    for i in order:
        pos = _align(pos)
        offsets[i] = pos
        pos += described[i][3]
    entries = [
        ArrayEntry(kind, dtype, shape, offsets[i], nbytes)
        for i, (kind, dtype, shape, nbytes) in enumerate(described)
    ]
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
    limit = small_limit(chunk_size)
    for e in sorted(entries, key=lambda e: e.offset):
        if e.nbytes == 0:
            continue
        if e.nbytes >= limit:
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


class SpanIndex:
    """Finds which arrays a byte range of the buffer covers."""

    def __init__(self, entries: list[ArrayEntry]) -> None:
        self.entries = entries
        self.order = sorted(range(len(entries)), key=lambda i: entries[i].offset)
        self.starts = [entries[i].offset for i in self.order]
        end = 0
        for i in self.order:  # a chunk's bytes must belong to one array each
            e = entries[i]
            if e.nbytes and e.offset < end:
                raise CheckpointError(
                    f"arrays overlap in the manifest's layout (array {i} at byte {e.offset}); "
                    "a sharded checkpoint merged by burst before this fix cannot be restored "
                    "safely"
                )
            end = max(end, e.offset + e.nbytes)

    def segments(self, span: ChunkSpan) -> list[tuple[int, int, int, int]]:
        """(entry index, offset in entry, offset in chunk, length) pieces of one chunk."""
        out = []
        lo, hi = span.offset, span.offset + span.size
        k = max(0, bisect.bisect_right(self.starts, lo) - 1)
        for i in self.order[k:]:
            e = self.entries[i]
            if e.offset >= hi:
                break
            a, b = max(lo, e.offset), min(hi, e.offset + e.nbytes)
            if a < b:
                out.append((i, a - e.offset, a - lo, b - a))
        return out
