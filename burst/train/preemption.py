"""What the train loop does on a stop notice: save what fits before the deadline, record the
attempt, and raise ``Preempted`` (exit 75, requeue).

Every wait from here on is bounded by the notice's deadline less ``RESERVE_S`` (the time to
record the attempt and exit): the emergency save waits for a save still in flight only that
long (``RunCheckpoints.bound``), so a slow upload during a reclaim ends as "the last committed
checkpoint stands", never as a process killed at the end of its grace period.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from burst import faults
from burst.documents.train import EmergencySave
from burst.documents.train import Notice as NoticeRecord
from burst.errors import CheckpointError, Preempted, QuotaTaken
from burst.obs.events import PREEMPTION, emit
from burst.preempt.emergency import RESERVE_S, choose_emergency_save, pending_s
from burst.preempt.notice import Notice
from burst.recovery import QUOTA_NOTICE
from burst.storage.base import StoreError
from burst.train.checkpoints import RunCheckpoints
from burst.train.engine import TrainEngine
from burst.train.ranks import RankLost, Ranks
from burst.train.records import AttemptRecords
from burst.train.survivors import survivors_commit, wait_own_shard

log = logging.getLogger(__name__)


def exit_by(notice: Notice) -> float | None:
    """time.time() by which the attempt stops waiting: the deadline less the reserve."""
    return None if notice.deadline is None else notice.deadline - RESERVE_S


def preempt(
    notice: Notice,
    step: int,
    engine: TrainEngine,
    store: RunCheckpoints,
    last_full: int | None,
    records: AttemptRecords,
    ranks: Ranks,
    save: Callable[[int, str], float],
) -> None:
    """Save what fits before the deadline (``save(step, tier)``), record the attempt, raise
    Preempted (its ``doc`` the step document)."""
    left = notice.seconds_left()
    records.metrics.record_preemption()
    emit(log, PREEMPTION, train_step=step, source=notice.source, seconds_left=left)
    log.warning(
        "preemption notice from %s at step %d: %s s left",
        notice.source,
        step,
        "unknown" if left is None else f"{left:.2f}",
    )

    def choose() -> dict[str, Any]:
        if last_full == step:
            return {
                "tier": "none",
                "seconds_left": left,
                "reason": f"the full checkpoint at step {step} is already saved",
            }
        full_bytes = engine.nbytes("full")
        # an engine without a weights tier: weights-only costs a full save, so the
        # choice is full if it fits, else the last committed checkpoint
        weights_bytes = engine.nbytes("weights") if "weights" in engine.tiers else full_bytes
        in_flight = store.mgr.status().in_flight if store.busy() else None
        costs = records.meter.costs(
            full_bytes=full_bytes,
            weights_bytes=weights_bytes,
            pending_s=pending_s(records.meter, full_bytes, weights_bytes, in_flight, last_full),
        )
        # the time left now: what was spent since the notice counts against half the window
        return choose_emergency_save(notice.seconds_left(), costs, notice.window_s()).as_dict()

    # No save handed over from here commits past the notice's deadline (the writer refuses
    # its manifest: at the deadline, what is committed counts); a routine save already in
    # flight is left to commit (RunCheckpoints.arm says why).
    store.arm(notice.deadline)
    with store.bound(exit_by(notice)):
        # several ranks: rank 0's measurements decide, every rank saves its part of that tier
        emergency: dict[str, Any] = ranks.decide(choose)
        faults.checkpoint("emergency-decided")
        if emergency["tier"] != "none":
            if ranks.many:
                emergency.update(
                    _ranks_save(store, step, emergency["tier"], notice, save, ranks, engine)
                )
            else:
                emergency.update(_emergency_save(store, step, emergency["tier"], notice, save))
        # a peer lost: the survivors settled it; a shard it lost is not waited for
        lost = "peer_lost" in emergency
        if not lost:
            try:  # a save still in flight commits, or not, before the deadline too
                store.commit()  # capped by the bound
            except (CheckpointError, StoreError) as exc:
                emergency.setdefault("error", exc.one_line())
    records.learn(store)
    if ranks.many and not lost:  # rank 0's worker committed the global manifest, or did not
        emergency.update(
            ranks.decide(
                lambda: {k: emergency[k] for k in ("committed", "error") if k in emergency}
            )
        )
    latest = store.latest()
    # a save still under way may yet commit while the process exits (the writer finishes
    # it), or be lost with the node: say which step it was
    emergency["in_flight_step"] = store.mgr.status().in_flight
    emergency["last_committed"] = (
        None if latest is None else {"step": latest.step, "tier": latest.tier}
    )
    outcome = emergency["tier"]
    if emergency.get("committed") is False:
        outcome += f" (not committed: {emergency.get('error')}; the last committed stands)"
    log.warning("emergency save: %s (%s)", outcome, emergency["reason"])
    rec = records.record
    rec.outcome = "preempted"
    rec.preempted = True
    rec.ended_at_step = step
    rec.notice = NoticeRecord.model_validate(notice.as_dict())
    rec.emergency_save = EmergencySave.model_validate(emergency)
    rec.notice_to_exit_s = round(time.time() - notice.received_at, 3)
    records.finish(store, gather=not lost)  # a lost peer: no collective can run
    if notice.source == QUOTA_NOTICE:  # the rental goes back; the run waits in the queue
        stop: Preempted = QuotaTaken(
            f"Kueue evicted the run at step {step} (a higher-priority run took its team's "
            f"quota); emergency save: {outcome}; exit 76 to give the nodes up and wait in "
            "the queue again"
        )
    else:
        stop = Preempted(
            f"preempted at step {step} by {notice.source}; emergency save: "
            f"{outcome}; exit 75 to requeue"
        )
    stop.doc = records.doc(store, step)
    raise stop


def _ranks_save(
    store: RunCheckpoints,
    step: int,
    tier: str,
    notice: Notice,
    save: Callable[[int, str], float],
    ranks: Ranks,
    engine: TrainEngine,
) -> dict[str, Any]:
    """Several ranks: each hands its part to its writer and waits until its shard is
    durable; one gather then says every shard is (rank 0's writer then commits the global
    manifest). A peer lost on the way (the gather fails) leaves it to the survivors
    (``burst.train.survivors``): a replica's part written in the lost rank's stead, or the
    last committed checkpoint."""
    started = time.monotonic()
    own: str | None = None
    try:
        save(step, tier)
        faults.checkpoint("emergency-handed")
        wait_own_shard(store, ranks, step, tier)
    except (CheckpointError, StoreError) as exc:
        own = f"rank {ranks.rank}: {exc.one_line()}"
    faults.checkpoint("emergency-shard")
    try:
        failed = [e for e in ranks.gather(own) if e]
    except RankLost as exc:
        out = survivors_commit(engine, store, ranks, step, tier, exc)
        if out.get("committed"):
            out.update(_landed(step, started, notice))
        return out
    if failed:
        return {"committed": False, "error": failed[0]}
    if not ranks.leader:
        return {}  # rank 0's writer commits the global manifest: rank 0 says (decide)
    try:
        store.commit()  # capped by the bound
    except (CheckpointError, StoreError) as exc:
        return {"committed": False, "error": exc.one_line()}
    return _landed(step, started, notice)


def _landed(step: int, started: float, notice: Notice) -> dict[str, Any]:
    committed_at = time.time()
    return {
        "committed": True,
        "committed_step": step,
        "seconds": round(time.monotonic() - started, 6),
        "committed_at": committed_at,
        "before_deadline": notice.deadline is None or committed_at <= notice.deadline,
    }


def _emergency_save(
    store: RunCheckpoints,
    step: int,
    tier: str,
    notice: Notice,
    save: Callable[[int, str], float],
) -> dict[str, Any]:
    """The save the choice asked for, committed before the bound, or why not."""
    started = time.monotonic()
    try:
        save(step, tier)
        store.commit()  # capped by the bound (none without a deadline)
    except (CheckpointError, StoreError) as exc:
        return {"committed": False, "error": exc.one_line()}
    return _landed(step, started, notice)
