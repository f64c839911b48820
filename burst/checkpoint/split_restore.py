"""Restore one checkpoint on W ranks, each rank reading only its part of it.

Every rank of a data-parallel run needs the whole state (DDP: replicated), but the chunks need
to be read and verified only once: the checkpoint's chunks (in layout order) are cut into W
contiguous runs of about equal bytes; rank ``r`` fetches and verifies run ``r`` into one flat
host buffer laid out as the manifest says, then every rank's run is broadcast from it over the
process group (``Exchange``, given by the caller). The arrays returned are views of that
buffer. Any world size restores any checkpoint (the cut follows the reader's world, not the
writer's), so a resharded restore is the same operation.

The ranks agree, after fetching, whether every part was sound (``Exchange.all_ok``); if any
was not (a missing or corrupt chunk: quarantined as by ``burst.checkpoint.restore``), all of
them fall back to the previous full checkpoint together, in the order rank 0 listed them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import blake3
import numpy as np

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest, chunk_key
from burst.checkpoint.restore import Restored
from burst.checkpoint.tree import unflatten
from burst.checkpoint.verify import ChunkAudit, quarantine_chunk
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore, StoreError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Exchange:
    """The collectives a split restore needs (``burst.train.ranks.Ranks`` provides them)."""

    rank: int
    world: int
    #: send ``tensor`` from rank ``src`` to every rank, in place
    broadcast: Callable[[Any, int], None]
    #: True on every rank iff ``flag`` is True on every rank
    all_ok: Callable[[bool], bool]
    #: rank 0's value, the same on every rank
    decide: Callable[[Callable[[], Any]], Any]


def cut(chunks: list[ChunkRef], world: int) -> list[list[ChunkRef]]:
    """``chunks`` in offset order, cut into ``world`` contiguous runs of about equal bytes
    (run ``r``: the chunks whose first byte falls in the r-th W-th of the total)."""
    ordered = sorted(chunks, key=lambda c: c.offset)
    total = sum(c.size for c in ordered)
    runs: list[list[ChunkRef]] = [[] for _ in range(world)]
    done = 0
    for c in ordered:
        r = min(world - 1, done * world // total) if total else 0
        runs[r].append(c)
        done += c.size
    return runs


def _fetch_run(
    store: ObjectStore,
    manifest: Manifest,
    run: list[ChunkRef],
    flat: np.ndarray,
    concurrency: int,
    audit: ChunkAudit,
) -> None:
    where = f"{store.url}/{manifest.key}"
    name = f"checkpoint step {manifest.step} ({manifest.tier})"

    def fetch(chunk: ChunkRef) -> None:
        dst = flat[chunk.offset : chunk.offset + chunk.size]
        try:
            store.get_into(chunk_key(chunk.digest), memoryview(dst))  # type: ignore[arg-type]
            data: Any = dst
        except ObjectMissing as exc:
            raise CheckpointError(
                f"{name}: chunk {chunk.digest[:16]} is missing", where=where
            ) from exc
        except StoreError as exc:
            if "bytes, expected" not in exc.message:
                raise
            data = b""
        if len(data) != chunk.size or blake3.blake3(data).hexdigest() != chunk.digest:
            quarantine_chunk(store, chunk.digest, bytes(data) if len(data) else None)
            audit.corrupt.add(chunk.digest)
            raise CheckpointError(
                f"{name}: chunk {chunk.digest[:16]} is corrupt (checksum mismatch)", where=where
            )
        audit.sound.add(chunk.digest)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ckpt-get") as pool:
        futures = [pool.submit(fetch, c) for c in run]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def _arrays(manifest: Manifest, flat_t: Any, flat: np.ndarray) -> list[Any]:
    import torch

    out: list[Any] = []
    for e in manifest.arrays:
        if e.kind == "numpy":
            raw = flat[e.offset : e.offset + e.nbytes]
            out.append(raw.view(np.dtype(e.dtype)).reshape(e.shape))
            continue
        dtype = getattr(torch, e.dtype, None)
        if not isinstance(dtype, torch.dtype):
            raise CheckpointError(f"unknown tensor dtype {e.dtype!r} in manifest")
        if e.nbytes == 0:
            out.append(torch.empty(e.shape, dtype=dtype))
        else:
            out.append(flat_t[e.offset : e.offset + e.nbytes].view(dtype).view(e.shape))
    return out


def restore_split(
    store: ObjectStore,
    refs: list[CheckpointRef],
    ex: Exchange,
    *,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> Restored | None:
    """The newest of ``refs`` (rank 0's list, oldest first) that every rank's part of
    restores, the same on every rank; None if ``refs`` is empty. CheckpointError (every rank)
    if none restores."""
    import torch

    keys: list[tuple[int, str, str]] = ex.decide(lambda: [(r.step, r.tier, r.key) for r in refs])
    audit = audit if audit is not None else ChunkAudit()
    failures: list[str] = []
    for step, tier, key in reversed(keys):
        ref = CheckpointRef(step=step, tier=tier, key=key)
        problem = ""
        manifest: Manifest | None = None
        flat_t: Any = None
        runs: list[list[ChunkRef]] = []
        try:
            manifest = load_manifest(store, ref)
            size = max([c.offset + c.size for c in manifest.chunks] + [manifest.total_bytes])
            flat_t = torch.empty(size, dtype=torch.uint8)
            runs = cut(manifest.chunks, ex.world)
            _fetch_run(store, manifest, runs[ex.rank], flat_t.numpy(), concurrency, audit)
        except (CheckpointError, StoreError) as exc:
            problem = exc.one_line()
        if not ex.all_ok(not problem):
            failures.append(problem or f"checkpoint step {step} ({tier}): another rank's part")
            log.warning(
                "checkpoint step %d (%s) does not restore (%s); falling back to the previous one",
                step,
                tier,
                problem or "another rank's part failed",
            )
            continue
        assert manifest is not None
        for src, run in enumerate(runs):
            if run:
                a, b = run[0].offset, run[-1].offset + run[-1].size
                ex.broadcast(flat_t[a:b], src)
        arrays = _arrays(manifest, flat_t, flat_t.numpy())
        if failures:
            log.warning("restored step %d (%s) after %d unusable", step, tier, len(failures))
        return Restored(step, tier, unflatten(manifest.tree, arrays), manifest)
    if not keys:
        return None
    raise CheckpointError(
        f"no usable checkpoint among {len(failures)}: " + " | ".join(failures), where=store.url
    )
