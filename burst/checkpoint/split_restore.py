"""Restore one checkpoint on W ranks at the same time, the work split between them.

Every rank of a data-parallel run needs the whole state (DDP: replicated), but the chunks need
to be verified (and, with ``share``, read) only once in all: the checkpoint's chunks (in layout
order) are cut into W contiguous runs of about equal bytes, run ``r`` being rank ``r``'s part.
Every rank fills one flat host buffer laid out as the manifest says:

* default: every rank fetches every chunk, all ranks at once, and verifies (blake3) only its
  part: the hashing is done once in all, the reads W times in parallel (each node reads the
  store at its own speed; on one machine the store is the page cache);
* ``share=True``: rank ``r`` fetches and verifies only run ``r``, then each run is broadcast
  from its rank over the process group (``Exchange``, given by the caller): the store is read
  once in all, for a store slower than the ranks' network.

Large arrays returned are views of that buffer. Any world size restores any checkpoint (the
cut follows the reader's world, not the writer's), so a resharded restore is the same
operation. The ranks agree, after fetching, whether every part was sound
(``Exchange.all_ok``); if any was not (a missing or corrupt chunk: quarantined as by
``burst.checkpoint.restore``), all of them fall back to the previous full checkpoint
together, in the order rank 0 listed them. A chunk corrupt in the store is found by the rank
whose part it is; in-flight corruption on another rank's read is the transport's to catch
(TLS, S3 checksums), as a single-rank restore's reads of its own chunks are not re-read.
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

#: arrays smaller than this are copied out of the shared buffer (see ``_arrays``)
OWN_STORAGE_BELOW = 1 << 20


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
    check: set[int] | None = None,
) -> None:
    """Fetch the chunks of ``run`` into ``flat``, verifying those whose offset is in ``check``
    (all if None)."""
    where = f"{store.url}/{manifest.key}"
    name = f"checkpoint step {manifest.step} ({manifest.tier})"

    def fetch(chunk: ChunkRef) -> None:
        dst = flat[chunk.offset : chunk.offset + chunk.size]
        verify = check is None or chunk.offset in check
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
        if len(data) != chunk.size:
            verify = True
        if not verify:
            return
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
            continue
        t = flat_t[e.offset : e.offset + e.nbytes].view(dtype).view(e.shape)
        # large arrays stay views of the buffer (no copy); small ones get storage of their
        # own: some consumers read a tensor's storage from its start (torch.set_rng_state
        # crashes on a view at an offset)
        out.append(t if e.nbytes >= OWN_STORAGE_BELOW else t.clone())
    return out


def restore_split(
    store: ObjectStore,
    refs: list[CheckpointRef],
    ex: Exchange,
    *,
    share: bool = False,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> Restored | None:
    """The newest of ``refs`` (rank 0's list, oldest first) that every rank's part of
    restores, the same on every rank; None if ``refs`` is empty. CheckpointError (every rank)
    if none restores.

    ``share``: each rank fetches only its part and the parts are broadcast (the store is read
    once in all: for a store slower than the ranks' network). Otherwise every rank fetches
    every chunk, at the same time, and verifies only its part (the blake3 work is done once
    in all; a chunk corrupt in the store is found by the rank whose part it is, and all ranks
    fall back): for a store each node reads at full speed, as here."""
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
            own = runs[ex.rank]
            if share:
                _fetch_run(store, manifest, own, flat_t.numpy(), concurrency, audit)
            else:
                check = {c.offset for c in own}
                _fetch_run(
                    store, manifest, manifest.chunks, flat_t.numpy(), concurrency, audit, check
                )
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
            if run and share:
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
