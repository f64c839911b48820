"""Restore a sharded checkpoint of W ranks from the memory tiers, the store when they cannot.

With memory tiers (docs/checkpoints.md, "Tiers") a sharded manager's worker commits its
rank's part to each memory tier as an ordinary manifest under that rank's own prefix
(``tier_name``: the store's URL hashed, the world size and the rank), manifest last, before
the two-phase commit of the shards to the store. No global manifest exists in memory: a
checkpoint is held there whole when every rank's part is, each in one of the tiers of the
rank that wrote it (its own node's server, the next node's).

The read plan ``PartsRead`` is the one restore loop's (``restore_newest``) for that case: for
each candidate (rank 0's list: what the store committed and what its own part's tiers hold),
every rank reads every part, each from the first of its writer's tiers that holds it whole
and verified; the ranks agree (``Exchange.all_ok``) whether all of them read all parts. If
so, the state is the parts laid side by side as a global checkpoint's (``assemble`` joins
it; with ``into``, the train loop's live tensors, the parts' bytes went straight into them),
and ``Restored.source`` is ``local`` when every rank read only from the tiers named local,
else ``peer``. If not, the candidate is read from the store as ``SplitRead`` reads it
(when the store committed it), else skipped for the previous one. A world size other than
the writer's finds nothing in memory (the prefix names the world) and reads the store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from burst.checkpoint.manifest import CheckpointRef, Manifest
from burst.checkpoint.read_plan import Exchange
from burst.checkpoint.restore import Restored, restore_ref, targets_at
from burst.checkpoint.split_restore import SplitRead
from burst.checkpoint.tree import array_paths, unflatten
from burst.errors import CheckpointError
from burst.storage.base import ObjectStore, StoreError

log = logging.getLogger(__name__)

#: the memory tiers (name, store) that hold rank q's part, fastest first
TiersOf = Callable[[int], Sequence[tuple[str, ObjectStore]]]


@dataclass
class _Got:
    source: str  # "local", "peer" or "store"
    parts: list[Restored]
    split: Any = None


@dataclass
class PartsRead:
    """Every rank's part from the memory tiers (``tiers_of``), else ``split`` (the store)
    for the candidates in ``in_store``."""

    ex: Exchange
    world: int
    tiers_of: TiersOf
    split: SplitRead
    in_store: set[tuple[int, str]]
    concurrency: int = 8
    #: a whole state whose arrays receive each part's bytes in place (the train loop's live
    #: tensors): no fresh memory to fault in, no copy afterwards
    into: Any = None
    _skeleton: Any = None

    def _targets(self, manifest: Manifest) -> list[Any] | None:
        """The arrays of ``into`` that a part's arrays go into, by their path in the whole
        state (rank 0's part holds the skeleton, and is read first); None: fresh arrays."""
        part = unflatten(manifest.tree, list(range(len(manifest.arrays))))
        shard = part.get("shard") if isinstance(part, dict) else None
        if not isinstance(shard, dict):
            return None
        if shard.get("skeleton") is not None:
            self._skeleton = shard["skeleton"]
        if self._skeleton is None:
            return None
        whole = array_paths(self._skeleton)
        index, arrays = shard.get("index") or [], shard.get("arrays") or []
        paths: list[str | None] = [None] * len(manifest.arrays)
        if len(index) != len(arrays):
            return None  # not a part this reads in place: fresh arrays, checked as ever
        for at, mine in zip(index, arrays, strict=True):
            if 0 <= int(at) < len(whole) and 0 <= int(mine) < len(paths):
                paths[int(mine)] = whole[int(at)]
        return targets_at(paths, self.into)

    def _part(self, q: int, ref: CheckpointRef, problems: list[str]) -> tuple[str, Restored] | None:
        targets = self._targets if self.into is not None else None
        for name, tier in self.tiers_of(q):
            try:
                return name, restore_ref(tier, ref, concurrency=self.concurrency, targets=targets)
            except (CheckpointError, StoreError) as exc:
                problems.append(f"rank {q}'s part in {name} memory: {exc.one_line()}")
        if not self.tiers_of(q):
            problems.append(f"rank {q}'s part: no memory tier known")
        return None

    def read(self, ref: CheckpointRef) -> _Got:
        problems: list[str] = []
        parts: list[Restored] = []
        names: set[str] = set()
        self._skeleton = None
        for q in range(self.world):
            got = self._part(q, ref, problems)
            if got is None:
                break
            names.add(got[0])
            parts.append(got[1])
        # collectives: every rank reaches both, whatever it read
        if self.ex.all_ok(len(parts) == self.world):
            source = "local" if self.ex.all_ok(names <= {"local"}) else "peer"
            return _Got(source, parts)
        if problems:
            log.warning(
                "checkpoint step %d (%s) not whole in memory (%s): the store",
                ref.step,
                ref.tier,
                problems[0],
            )
        if (ref.step, ref.tier) not in self.in_store:
            raise CheckpointError(
                f"checkpoint step {ref.step} ({ref.tier}) is in no tier whole"
                + (f": {problems[0]}" if problems else ": another rank's part"),
                where=self.split.store.url,
            )
        return _Got("store", [], self.split.read(ref))

    def finish(self, ref: CheckpointRef, got: _Got) -> Restored:
        if got.source == "store":
            restored = self.split.finish(ref, got.split)
            restored.source = "store"
            return restored
        state = {"sharded": {"world": self.world, "shards": [p.state for p in got.parts]}}
        return Restored(ref.step, ref.tier, state, got.parts[0].manifest, got.source)
