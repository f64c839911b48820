"""Restore a sharded checkpoint on W ranks, each rank fetching only its own shard when it can.

A checkpoint whose state is truly sharded (FSDP2: each rank saved only its own pieces) and
that was saved by as many ranks as read it: rank ``r`` needs only shard ``r`` (and rank 0's
head), so it fetches and verifies only the chunks of those arrays; across the ranks every
chunk is read and verified once. Saved by another number of ranks (resharding), every rank
needs every piece: all fetch everything at once and each verifies its W-th, as
``burst.checkpoint.split_restore`` does. The ranks agree whether every part was sound and
otherwise fall back to the previous checkpoint together, in the order rank 0 listed them.

The arrays of the other ranks' shards are returned unfilled (their bytes were not fetched):
the caller uses only its own shard (``burst.checkpoint.dtensor_parts.own_shards``).
"""

from __future__ import annotations

import logging
from typing import Any

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest
from burst.checkpoint.restore import Restored
from burst.checkpoint.split_restore import Exchange, _arrays, _fetch_run, cut
from burst.checkpoint.tree import unflatten
from burst.checkpoint.verify import ChunkAudit
from burst.errors import CheckpointError
from burst.storage.base import ObjectStore, StoreError

log = logging.getLogger(__name__)


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
    import torch

    keys: list[tuple[int, str, str]] = ex.decide(lambda: [(r.step, r.tier, r.key) for r in refs])
    audit = audit if audit is not None else ChunkAudit()
    failures: list[str] = []
    for step, tier, key in reversed(keys):
        problem = ""
        manifest: Manifest | None = None
        flat_t: Any = None
        try:
            manifest = load_manifest(store, CheckpointRef(step=step, tier=tier, key=key))
            size = max([c.offset + c.size for c in manifest.chunks] + [manifest.total_bytes])
            flat_t = torch.empty(size, dtype=torch.uint8)  # pages not fetched stay untouched
            own = own_chunks(manifest, ex.rank, ex.world, part)
            if own is not None:
                _fetch_run(store, manifest, own, flat_t.numpy(), concurrency, audit)
            else:
                check = {c.offset for c in cut(manifest.chunks, ex.world)[ex.rank]}
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
        arrays = _arrays(manifest, flat_t, flat_t.numpy())
        if failures:
            log.warning("restored step %d (%s) after %d unusable", step, tier, len(failures))
        return Restored(step, tier, unflatten(manifest.tree, arrays), manifest)
    if not keys:
        return None
    raise CheckpointError(
        f"no usable checkpoint among {len(failures)}: " + " | ".join(failures), where=store.url
    )
