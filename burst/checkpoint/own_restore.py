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
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest
from burst.checkpoint.read_plan import Exchange, restore_newest
from burst.checkpoint.restore import Restored
from burst.checkpoint.split_restore import _arrays, _fetch_run, cut
from burst.checkpoint.tree import unflatten
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


@dataclass
class OwnRead:
    """The read plan of W ranks restoring a sharded checkpoint: saved by as many ranks, each
    fetches and verifies only its own shard (and rank 0's head); saved by another number,
    every rank fetches every chunk and verifies its W-th (as ``SplitRead`` does)."""

    store: ObjectStore
    ex: Exchange
    part: str
    concurrency: int = 8
    audit: ChunkAudit = field(default_factory=ChunkAudit)

    def read(self, ref: CheckpointRef) -> tuple[Manifest, Any]:
        import torch

        manifest = load_manifest(self.store, ref)
        size = max([c.offset + c.size for c in manifest.chunks] + [manifest.total_bytes])
        flat_t = torch.empty(size, dtype=torch.uint8)  # pages not fetched stay untouched
        own = own_chunks(manifest, self.ex.rank, self.ex.world, self.part)
        if own is not None:
            _fetch_run(self.store, manifest, own, flat_t.numpy(), self.concurrency, self.audit)
        else:
            check = {c.offset for c in cut(manifest.chunks, self.ex.world)[self.ex.rank]}
            _fetch_run(
                self.store,
                manifest,
                manifest.chunks,
                flat_t.numpy(),
                self.concurrency,
                self.audit,
                check,
            )
        return manifest, flat_t

    def finish(self, ref: CheckpointRef, got: tuple[Manifest, Any]) -> Restored:
        manifest, flat_t = got
        arrays = _arrays(manifest, flat_t, flat_t.numpy())
        return Restored(ref.step, ref.tier, unflatten(manifest.tree, arrays), manifest)


def restore_own(
    store: ObjectStore,
    refs: list[CheckpointRef],
    ex: Exchange,
    part: str,
    *,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> Restored | None:
    """The newest of ``refs`` (rank 0's list, oldest first) whose every rank's part restores,
    the same on every rank; None if ``refs`` is empty; CheckpointError if none restores."""
    plan = OwnRead(
        store,
        ex,
        part,
        concurrency=concurrency,
        audit=audit if audit is not None else ChunkAudit(),
    )
    return restore_newest(refs, plan, where=store.url, ex=ex)
