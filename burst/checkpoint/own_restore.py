"""Restore a sharded checkpoint on W ranks, each rank fetching only its own shard when it can.

A checkpoint whose state is truly sharded (FSDP2: each rank saved only its own pieces) and
that was saved by as many ranks as read it: rank ``r`` needs only shard ``r`` (and rank 0's
head), so it fetches and verifies only the chunks of those arrays; across the ranks every
chunk is read and verified once. Saved by another number of ranks (resharding), every rank
needs every piece: all fetch everything at once and each verifies its W-th, as
``burst.checkpoint.split_restore`` does. The ranks agree whether every part was sound and
otherwise fall back to the previous checkpoint together, in the order rank 0 listed them (the
one restore loop, ``burst.checkpoint.read_plan.restore_newest``, with the read plan
``OwnRead``).

The arrays of the other ranks' shards are returned unfilled (their bytes were not fetched):
the caller uses only its own shard (``burst.checkpoint.dtensor_parts.own_shards``).

``into``: this rank's own part as it saves it (the live model's and optimizer's local
shards): the bytes of its own shard go straight into those tensors where path, dtype and
shape match (``burst.checkpoint.restore.allocate``), as DCP's ``load`` writes into the state
dict it is given: no fresh memory to fault in (about half the CPU of a restore that reads
into a new buffer: one page fault per 4 KiB), no second copy. As with the split restore,
the live tensors hold the newest candidate tried; if none restores their content is
undefined (the caller fails anyway).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest
from burst.checkpoint.read_plan import Exchange, restore_newest
from burst.checkpoint.restore import Restored, allocate, fetch_chunks, targets_at
from burst.checkpoint.split_restore import cut
from burst.checkpoint.tree import indexed_paths, unflatten
from burst.checkpoint.verify import ChunkAudit
from burst.storage.base import ObjectStore


def _indices(tree: Any, out: set[int]) -> None:
    if isinstance(tree, list):
        for v in tree:
            _indices(v, out)
    elif isinstance(tree, dict):
        if len(tree) == 1:
            ((tag, val),) = tree.items()
            if tag in ("__tensor__", "__ndarray__") and isinstance(val, int):
                out.add(val)
                return
        for v in tree.values():
            _indices(v, out)


def own_chunks(manifest: Manifest, rank: int, world: int, part: str) -> list[ChunkRef] | None:
    """The chunks rank ``rank`` needs of a checkpoint saved by ``world`` ranks whose shards
    hold ``part`` (its own shard, rank 0's head); None if it needs them all (another world
    size, or not such a checkpoint)."""
    tree = manifest.tree
    sharded = tree.get("sharded") if isinstance(tree, dict) and len(tree) == 1 else None
    if not isinstance(sharded, dict) or sharded.get("world") != world:
        return None
    shards = sharded.get("shards")
    if not isinstance(shards, list) or len(shards) != world:
        return None
    if not all(isinstance(s, dict) and isinstance(s.get(part), dict) for s in shards):
        return None
    wanted: set[int] = set()
    _indices(shards[rank], wanted)
    _indices(shards[0][part].get("head"), wanted)
    spans = sorted(
        (a.offset, a.offset + a.nbytes) for i, a in enumerate(manifest.arrays) if i in wanted
    )
    out = []
    for c in sorted(manifest.chunks, key=lambda c: c.offset):
        if any(a < c.offset + c.size and c.offset < b for a, b in spans if b > a):
            out.append(c)
    return out


def own_paths(manifest: Manifest, rank: int) -> list[str | None]:
    """For each array of ``manifest``, its path in shard ``rank``'s own tree (as that rank
    saved it: ``.fsdp2.model.0.weight.dtensor.local``), None for the other shards' arrays;
    all None if ``manifest`` is not a sharded checkpoint with such a shard."""
    out: list[str | None] = [None] * len(manifest.arrays)
    tree = manifest.tree
    sharded = tree.get("sharded") if isinstance(tree, dict) and len(tree) == 1 else None
    shards = sharded.get("shards") if isinstance(sharded, dict) else None
    if not isinstance(shards, list) or not 0 <= rank < len(shards):
        return out
    for i, path in indexed_paths(shards[rank]).items():
        if 0 <= i < len(out):
            out[i] = path
    return out


@dataclass
class OwnRead:
    """The read plan of W ranks restoring a sharded checkpoint: saved by as many ranks, each
    fetches and verifies only its own shard (and rank 0's head); saved by another number,
    every rank fetches every chunk and verifies its W-th (as ``SplitRead`` does). ``into``:
    makes this rank's own part as it saves it, whose tensors receive their bytes in place
    (called once, only when there is a candidate to read)."""

    store: ObjectStore
    ex: Exchange
    part: str
    into: Callable[[], Any] | None = None
    concurrency: int = 8
    audit: ChunkAudit = field(default_factory=ChunkAudit)
    _into: Any = field(default=None, init=False, repr=False)

    def read(self, ref: CheckpointRef) -> tuple[Manifest, list[Any]]:
        manifest = load_manifest(self.store, ref)
        targets = None
        if self.into is not None:
            if self._into is None:
                self._into = self.into()
            targets = targets_at(own_paths(manifest, self.ex.rank), self._into)
        # fresh arrays (untouched memory: the pages of what is not fetched are never faulted
        # in) where no live tensor fits
        outs, raws = allocate(manifest, targets)
        own = own_chunks(manifest, self.ex.rank, self.ex.world, self.part)
        if own is not None:
            chunks, check = own, None
        else:
            chunks = manifest.chunks
            check = {c.offset for c in cut(manifest.chunks, self.ex.world)[self.ex.rank]}
        fetch_chunks(
            self.store,
            manifest,
            chunks,
            raws,
            check=check,
            concurrency=self.concurrency,
            audit=self.audit,
        )
        return manifest, outs

    def finish(self, ref: CheckpointRef, got: tuple[Manifest, list[Any]]) -> Restored:
        manifest, arrays = got
        return Restored(ref.step, ref.tier, unflatten(manifest.tree, arrays), manifest)


def restore_own(
    store: ObjectStore,
    refs: list[CheckpointRef],
    ex: Exchange,
    part: str,
    *,
    into: Callable[[], Any] | None = None,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> Restored | None:
    """The newest of ``refs`` (rank 0's list, oldest first) whose every rank's part restores,
    the same on every rank; None if ``refs`` is empty; CheckpointError if none restores.
    ``into``: makes this rank's own part as it saves it (the live tensors), called only if
    there is a candidate; its tensors receive their bytes in place."""
    plan = OwnRead(
        store,
        ex,
        part,
        into=into,
        concurrency=concurrency,
        audit=audit if audit is not None else ChunkAudit(),
    )
    return restore_newest(refs, plan, where=store.url, ex=ex)
