"""Survivors commit: a rank lost during a multi-rank emergency save (issue 44).

A sharded checkpoint commits only when every rank's shard manifest exists
(``burst.checkpoint.sharded``); a rank killed before its shard is written would leave the
emergency save uncommitted, and the run would resume from the checkpoint before. What the
surviving ranks can do about it depends on where the lost rank's part exists elsewhere:

* **replicated engines** (DDP: ``replicated = True``, every rank holds the whole model,
  optimizer and scheduler, bit-identical): the lost rank's part is in every survivor's
  memory. One survivor per missing part (elected through the rendezvous store, which
  outlives a rank: ``Ranks.claim``) writes it as that rank's shard, with the same session,
  from its own replica (``part_of``); and one survivor commits the global manifest itself,
  in case rank 0 is the one lost (rank 0's worker, alive, commits the same shards too:
  either manifest is whole). The checkpoint of the notice's step commits.
* **sharded engines** (FSDP2, DeepSpeed ZeRO): a shard only the lost rank held exists
  nowhere else (FSDP2's parameters and optimizer state, ZeRO's partitions, are cut over
  the ranks with no copy), so nothing whole can be published at this step: no survivor
  writes anything, the global manifest is never written (the two-phase commit), and the run
  resumes from the last committed checkpoint.

Never torn: a global manifest is written only over a complete set of shards, checked, each
part whole (``commit_shards``). Never blocked: every wait here is capped by the notice's
deadline (less the reserve), and no collective of the broken process group runs again.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from typing import Any

from burst.checkpoint import CheckpointManager
from burst.checkpoint.sharded import (
    ShardInfo,
    commit_shards,
    committed_in_session,
    shards_present,
)
from burst.errors import CheckpointError
from burst.storage.base import StoreError
from burst.train.checkpoints import NOTICE_SIGNALS, RunCheckpoints
from burst.train.ranks import RankLost, Ranks

log = logging.getLogger(__name__)

#: how long survivors wait for a commit when no notice bounds the wait
DEFAULT_WAIT_S = 30.0
POLL_S = 0.05
#: how long survivors give a live peer's shard to land before writing it from a replica
SETTLE_S = 2.0


def replicated(engine: object) -> bool:
    """Whether every rank of ``engine`` holds the whole state (a lost part can be rebuilt)."""
    return bool(getattr(engine, "replicated", False)) and hasattr(engine, "part_of")


def _left(store: RunCheckpoints) -> float:
    left = store.seconds_left()
    return DEFAULT_WAIT_S if left is None else left


def wait_own_shard(store: RunCheckpoints, ranks: Ranks, step: int, tier: str) -> None:
    """Until this rank's shard manifest of (``step``, ``tier``) is durable: a rank other than
    0 waits for its writer (the shard is all it commits); rank 0, whose writer goes on to
    commit the global manifest, waits until its own shard exists. CheckpointError if it
    failed or the bound passed first."""
    if not ranks.leader:
        store.commit()
        return
    shard = store.mgr.shard
    assert shard is not None
    end = time.monotonic() + _left(store)
    while ranks.rank not in shards_present(store.mgr.store, step, tier, shard):
        if not store.busy():
            store.commit()  # it ended without the shard: raises why
            return
        if time.monotonic() >= end:
            raise CheckpointError(
                f"rank 0's shard of step {step} ({tier}) was not written before the notice's "
                "deadline",
                where=store.location,
            )
        time.sleep(POLL_S)


def survivors_commit(
    engine: object,
    store: RunCheckpoints,
    ranks: Ranks,
    step: int,
    tier: str,
    lost: RankLost,
) -> dict[str, Any]:
    """After ``lost`` (a peer gone during the emergency save of ``step``): what this survivor
    did to commit it, as fields of the attempt's ``emergency_save``."""
    shard = store.mgr.shard
    assert shard is not None
    objects = store.mgr.store
    log.warning("emergency save of step %d (%s): %s", step, tier, lost.one_line())
    out: dict[str, Any] = {"peer_lost": lost.one_line()}
    if not replicated(engine):
        out["survivors"] = "fallback"
        out["survivors_reason"] = (
            f"engine {getattr(engine, 'name', '?')} shards its state over the ranks: the lost "
            "rank's part exists nowhere else, so nothing whole can commit at this step"
        )
        if ranks.leader:  # committed if the lost rank's shard was written: not waited for
            out["committed"] = _done(objects, shard, step, tier)
            if not out["committed"]:
                out["error"] = "a rank was lost before its shard was written"
        return out
    end = time.monotonic() + _left(store)
    # a live peer's shard may still be landing (rank 0 reaches the gather last): a moment
    # for it, so that only a lost rank's part is written again
    settle = time.monotonic() + min(SETTLE_S, _left(store) * 0.1)
    present = shards_present(objects, step, tier, shard)
    while len(present) < shard.world and time.monotonic() < settle:
        if _done(objects, shard, step, tier):
            break
        time.sleep(POLL_S * 4)
        present = shards_present(objects, step, tier, shard)
    # listed after: a commit writes its manifest before it deletes the shards
    if _done(objects, shard, step, tier):
        out.update(survivors="replica", missing_ranks=[], stand_in_ranks=[], committed=True)
        return out
    missing = [r for r in range(shard.world) if r not in present]
    wrote: list[int] = []
    for k in missing:
        if ranks.claim(f"stand-in/{step}.{tier}/{k}"):
            try:
                left = end - time.monotonic()
                _stand_in(engine, objects, shard, step, tier, k, left, store.armed)
            except (CheckpointError, StoreError) as exc:
                out["error"] = f"rank {k}'s part, written by rank {ranks.rank}: {exc.one_line()}"
                log.warning("%s", out["error"])
                continue
            wrote.append(k)
    out["survivors"] = "replica"
    out["missing_ranks"] = missing
    out["stand_in_ranks"] = wrote
    committer = ranks.claim(f"commit/{step}.{tier}")
    if committer or ranks.leader:
        watch = ranks.leader and not committer
        committed = _commit(objects, shard, step, tier, end, watch, store.armed)
        out["committed"] = committed
        if committed:
            out.pop("error", None)
            out["committed_by"] = "survivor" if committer else "rank 0"
        else:
            out.setdefault("error", f"step {step} ({tier}) did not commit before the deadline")
    log.warning(
        "rank %d: survivors commit step %d (%s): missing %s, written here %s, committed %s",
        ranks.rank,
        step,
        tier,
        missing,
        wrote,
        out.get("committed"),
    )
    return out


def _stand_in(
    engine: object,
    objects: Any,
    shard: ShardInfo,
    step: int,
    tier: str,
    rank: int,
    timeout: float,
    commit_by: float | None,
) -> None:
    """Rank ``rank``'s shard of (``step``, ``tier``), written from this replica by a writer of
    its own that stops after the shard (phase 1)."""
    if timeout <= 0:
        raise CheckpointError("no time left before the notice's deadline", where=objects.url)
    part = engine.part_of(step, tier, rank)  # type: ignore[attr-defined]
    # its writer starts with SIGTERM and SIGINT held, as every checkpoint writer of the
    # train step (RunCheckpoints.save_via): torchrun signals the survivors once a rank died
    held = signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)
    try:
        mgr = CheckpointManager(
            objects, shard=dataclasses.replace(shard, rank=rank, global_commit=False)
        )
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        mgr.commit_by(commit_by)  # no later than the notice's deadline, as every rank's
        mgr.save(step, part, tier)
        mgr.wait(timeout, retry=False)
    finally:
        mgr.close(timeout=1.0)


def _commit(
    objects: Any,
    shard: ShardInfo,
    step: int,
    tier: str,
    end: float,
    watch_only: bool,
    commit_by: float | None,
) -> bool:
    """The global manifest of (``step``, ``tier``) exists by ``end``; this rank writes it once
    every shard exists, unless ``watch_only`` (rank 0, whose own writer commits it)."""
    while True:
        if _done(objects, shard, step, tier):
            return True
        left = end - time.monotonic()
        if left <= 0:
            return False
        if not watch_only and len(shards_present(objects, step, tier, shard)) == shard.world:
            try:
                again = dataclasses.replace(shard, commit_timeout_s=left)
                commit_shards(objects, step, tier, again, commit_by=commit_by)
                return True
            except (CheckpointError, StoreError) as exc:  # another committer got there
                log.info("survivor commit of step %d: %s", step, exc.one_line())
        time.sleep(POLL_S)


def _done(objects: Any, shard: ShardInfo, step: int, tier: str) -> bool:
    """Whether this session's shards of (``step``, ``tier``) are committed."""
    return committed_in_session(objects, step, tier, shard.session) is not None
