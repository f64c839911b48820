"""Restore one checkpoint on W ranks at the same time, the work split between them.

Every rank of a data-parallel run needs the whole state (DDP: replicated), but the chunks need
to be verified (and, with ``share``, read) only once in all: the checkpoint's chunks (in layout
order) are cut into W contiguous runs of about equal bytes, run ``r`` being rank ``r``'s part.
Every rank fills the arrays of the whole state (``burst.checkpoint.restore.allocate``: fresh
ones, or with ``into`` the caller's own tensors, written in place as DCP's ``load`` does):

* default: every rank fetches every chunk, all ranks at once, and verifies (blake3) only its
  part: the hashing is done once in all, the reads W times in parallel (each node reads the
  store at its own speed; on one machine the store is the page cache);
* ``share=True``: rank ``r`` fetches and verifies only run ``r``, then each run is broadcast
  from its rank over the process group (``Exchange``, given by the caller): the store is read
  once in all, for a store slower than the ranks' network.

The fetch and the verification are ``burst.checkpoint.restore.fetch_chunks``, as for one
rank's restore. With ``into`` the state's arrays are overwritten by each checkpoint tried; if
none restores, their content is undefined (the caller fails anyway). Any world size restores
any checkpoint (the cut follows the reader's world, not the writer's), so a resharded restore
is the same operation. The ranks agree, after fetching, whether every part was sound
(``Exchange.all_ok``); if any was not (a missing or corrupt chunk: quarantined as by
``burst.checkpoint.restore``), all of them fall back to the previous full checkpoint
together, in the order rank 0 listed them (the one restore loop,
``burst.checkpoint.read_plan.restore_newest``, with the read plan ``SplitRead``). A chunk
corrupt in the store is found by the rank whose part it is; in-flight corruption on another
rank's read is the transport's to catch (TLS, S3 checksums), as a single-rank restore's
reads of its own chunks are not re-read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest
from burst.checkpoint.read_plan import Exchange, restore_newest
from burst.checkpoint.restore import Restored, allocate, fetch_chunks, match_targets
from burst.checkpoint.tree import unflatten
from burst.checkpoint.verify import ChunkAudit
from burst.storage.base import ObjectStore

__all__ = ["Exchange", "SplitRead", "cut", "restore_split"]


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


def _broadcast_runs(
    manifest: Manifest, runs: list[list[ChunkRef]], raws: list[np.ndarray], ex: Exchange
) -> None:
    """Send each rank's run of chunks to every rank: the pieces of the arrays it covers."""
    import torch

    order = sorted(range(len(manifest.arrays)), key=lambda i: manifest.arrays[i].offset)
    for src, run in enumerate(runs):
        if not run:
            continue
        lo, hi = run[0].offset, run[-1].offset + run[-1].size
        for i in order:
            e = manifest.arrays[i]
            a, b = max(lo, e.offset), min(hi, e.offset + e.nbytes)
            if a < b:
                ex.broadcast(torch.from_numpy(raws[i][a - e.offset : b - e.offset]), src)


@dataclass
class _Split:
    """What one rank read of one candidate: its arrays and their bytes, the runs."""

    manifest: Manifest
    outs: list[Any]
    raws: list[np.ndarray]
    runs: list[list[ChunkRef]]


@dataclass
class SplitRead:
    """The read plan of W ranks restoring one whole state each, the work split between
    them: ``share=False`` split-verify (every rank fetches every chunk, verifies its run),
    ``share=True`` split-share (each rank fetches its run; the runs are broadcast)."""

    store: ObjectStore
    ex: Exchange
    share: bool = False
    into: Any = None
    concurrency: int = 8
    audit: ChunkAudit = field(default_factory=ChunkAudit)

    def read(self, ref: CheckpointRef) -> _Split:
        manifest = load_manifest(self.store, ref)
        into = None if self.into is None else match_targets(manifest, self.into)
        outs, raws = allocate(manifest, into)
        runs = cut(manifest.chunks, self.ex.world)
        own = runs[self.ex.rank]
        if self.share:
            chunks, check = own, None
        else:
            chunks, check = manifest.chunks, {c.offset for c in own}
        fetch_chunks(
            self.store,
            manifest,
            chunks,
            raws,
            check=check,
            concurrency=self.concurrency,
            audit=self.audit,
        )
        return _Split(manifest, outs, raws, runs)

    def finish(self, ref: CheckpointRef, got: _Split) -> Restored:
        if self.share:
            _broadcast_runs(got.manifest, got.runs, got.raws, self.ex)
        return Restored(ref.step, ref.tier, unflatten(got.manifest.tree, got.outs), got.manifest)


def restore_split(
    store: ObjectStore,
    refs: list[CheckpointRef],
    ex: Exchange,
    *,
    share: bool = False,
    into: Any = None,
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
    fall back): for a store each node reads at full speed, as here.

    ``into``: a whole state (``assemble``'s shape: the model's and optimizer's state dicts)
    whose tensors receive the bytes in place where path, dtype and shape match; the restored
    state then holds those very tensors (no second copy, no fresh memory to fault in)."""
    plan = SplitRead(
        store,
        ex,
        share=share,
        into=into,
        concurrency=concurrency,
        audit=audit if audit is not None else ChunkAudit(),
    )
    return restore_newest(refs, plan, where=store.url, ex=ex)
