"""The resilient training loop.

Deterministic (seeded RNGs, deterministic algorithms, batches a pure function of the step),
checkpointing on a schedule (``burst.train.schedule``) through the checkpoint engine
(asynchronous: training is blocked only while the state is copied to a host buffer), resuming
from the latest FULL checkpoint with model, optimizer, scheduler, RNG states and data
position. At every step boundary it reads the preemption notice board (``burst.preempt``): on
a stop notice it saves what fits in the time left and raises ``Preempted`` (exit 75, requeue);
an advisory notice (rebalance) makes it checkpoint now and carry on.

The optimizer step and the engine's own saving and restoring are ``burst.train.engine``'s
(``training.engine``: plain torch, or DeepSpeed with full checkpoints only); all the above is
shared by both.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from burst import faults
from burst.budget import BudgetExceeded, BudgetGuard
from burst.checkpoint.sharded import ShardInfo
from burst.checkpoint.verify import verify_checkpoint
from burst.errors import BurstError, CheckpointError, Preempted
from burst.lease import (
    TRAINER_KEY,
    Lease,
    Renewer,
    describe_holder,
    heartbeat_key,
    heartbeat_store,
    is_live,
    read_lease,
)
from burst.obs.events import CHECKPOINT, FIRST_TRAIN_STEP, PREEMPTION, emit
from burst.obs.metrics import RunMetrics, export_from_env
from burst.preempt.emergency import RESERVE_S, SaveMeter, choose_emergency_save
from burst.preempt.notice import Notice, NoticeBoard
from burst.preempt.watch import Watchers, start_watchers
from burst.runs import utcnow_iso
from burst.settings import current
from burst.spec import BurstJob
from burst.storage import open_store
from burst.storage.base import StoreError
from burst.storage.location import run_url
from burst.train.attempts import FILE_NAME, AttemptLog, next_number, settle_unclosed
from burst.train.checkpoints import RunCheckpoints
from burst.train.engine import TrainEngine, open_engine
from burst.train.ranks import RankLost, Ranks, preempt_rank
from burst.train.schedule import CheckpointSchedule, running_candidate
from burst.train.setup import build_setup

log = logging.getLogger(__name__)

#: the per-step losses an attempt record keeps (its first steps; a long run's curve is metrics)
LOSS_CURVE_MAX = 2000


def submitted_at() -> float | None:
    """When the run was submitted (``BURST_SUBMITTED_AT``: epoch seconds or ISO 8601, set by
    the local runner and by the workflow), for the GPU wait metric."""
    import datetime as dt

    from burst.settings import current

    raw = current().submitted_at
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        pass
    try:
        return dt.datetime.fromisoformat(raw.replace("Z", "+00:00")).timestamp()
    except ValueError:
        log.warning("BURST_SUBMITTED_AT=%r is not a time: GPU wait not measured", raw)
        return None


def hourly_rate(infra: dict[str, Any] | None, plan: dict[str, Any] | None) -> float | None:
    """USD per hour of what the run rents: the candidate provision got, else the plan's first."""
    cand = running_candidate(plan, infra)
    if cand is not None and isinstance(cand.get("price_per_hour"), int | float):
        return float(cand["price_per_hour"])
    return None


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


class TrainRun:
    """One attempt of the train step."""

    def __init__(
        self,
        job: BurstJob,
        run_id: str,
        run_dir: Path,
        plan: dict[str, Any] | None = None,
        infra: dict[str, Any] | None = None,
    ) -> None:
        self.job = job
        self.run_id = run_id
        self.run_dir = run_dir
        self.plan = plan
        self.infra = infra
        self.metrics = RunMetrics.for_job(run_id, job)
        self.demo = faults.demo_preemptions(run_dir / "preempt-demo.json")
        self.record: dict[str, Any] = {"started_at": utcnow_iso(), "preempted": False}
        self.lease: Lease | None = None
        self.heartbeat: Lease | None = None
        self.renewer: Renewer | None = None
        self.started = time.monotonic()
        self.ranks = Ranks()
        # this rank's own checkpoint figures (the leader gathers every rank's at the end)
        self.mine: dict[str, Any] = {"checkpoint_bytes": 0, "uploaded_bytes": 0, "stall_s": 0.0}

    # ------------------------------------------------------------------ leases

    def _take_leases(self, store: RunCheckpoints) -> None:
        """One trainer per run: the trainer lease in the run's store, taken before anything
        is read or written (refused, exit 3, while another live trainer renews it); and
        the run's heartbeat, which tells the reaper someone is driving the run."""
        if not self.ranks.leader:
            return  # one lease per run: rank 0 of a multi-process trainer holds it for all
        holder = describe_holder(f"run {self.run_id} trainer")
        self.lease = Lease.for_env(
            store.mgr.store, TRAINER_KEY, holder, f"run {self.run_id}'s trainer lease"
        )
        self.lease.take()
        self.heartbeat = Lease.for_env(
            heartbeat_store(self.run_id, self.run_dir),
            heartbeat_key("trainer"),
            holder,
            f"run {self.run_id}'s trainer heartbeat",
        )
        self.heartbeat.beat()

    def _start_renewing(self, board: NoticeBoard) -> None:
        if self.lease is None or self.heartbeat is None:
            return
        self.renewer = Renewer(
            [self.lease], self.lease.ttl / 4, tick=lambda: self._tick(board), beats=[self.heartbeat]
        ).start()

    def _tick(self, board: NoticeBoard) -> None:
        """Every renewal: keep the open attempt record current (so a killed attempt still
        counts, with its cost); stop if the lease was lost or the driver is gone."""
        if self.renewer is not None and self.renewer.lost.is_set():
            self._stop_notice(board, "lease-lost", "another trainer took this run's lease")
        if current().driver_heartbeat and self.heartbeat is not None:
            # lapsed, not merely "its process is gone": the bound is the same on every host
            driver = read_lease(self.heartbeat.store, heartbeat_key("driver"))
            if not is_live(driver):
                self._stop_notice(
                    board,
                    "driver-lost",
                    f"the run's driver ({(driver or {}).get('holder', 'unknown')}) stopped "
                    "renewing its heartbeat: saving and stopping (resume with `burst resume`)",
                )
        self.attempts.update(self._progress())

    def _stop_notice(self, board: NoticeBoard, source: str, detail: str) -> None:
        if board.stop_notice() is None:
            log.error("%s: %s", source, detail)
            board.post(Notice(source, time.time(), None, detail=detail))

    def _progress(self) -> dict[str, Any]:
        rec = dict(self.record)
        budget = getattr(self, "budget", None)
        if budget is not None:
            rec.update(
                cost_usd=round(budget.cost_usd() - budget.spent_usd, 6),
                hours=round(budget.hours() - budget.spent_hours, 6),
            )
        rec["last_seen_at"] = utcnow_iso()
        return rec

    def _release_leases(self) -> None:
        if self.renewer is not None:
            self.renewer.stop()
        for lease in (self.lease, self.heartbeat):
            if lease is not None and lease.token:
                lease.release()

    def _load_history(self, store: RunCheckpoints) -> None:
        """Earlier attempts (from the run's store, shared by every pod of the run) and the
        costs they measured, so this attempt starts with what they learned."""
        self.attempts = AttemptLog(self.run_dir / FILE_NAME, store.mgr.store)
        # a record left open belongs to an attempt that died: it counts (cost, preemption)
        self.past = settle_unclosed(self.attempts.read())
        closed = [a for a in self.past if a.get("outcome") != "died"]
        last = closed[-1] if closed else {}
        self.meter = SaveMeter.from_dict(last.get("save_meter"))
        self.schedule = CheckpointSchedule.for_job(
            self.job, self.plan, last.get("measured"), self.infra
        )
        self.record["attempt"] = next_number(self.past)
        rate = hourly_rate(self.infra, self.plan)
        if rate is None:
            log.warning("no price for what this run rents: only budget.max_hours is guarded")
        self.record["usd_per_hour"] = rate
        self.budget = BudgetGuard.start(
            self.job.budget.max_usd,
            self.job.budget.max_hours,
            rate or 0.0,
            spent_usd=sum(float(a.get("cost_usd") or 0) for a in self.past),
            spent_hours=sum(float(a.get("hours") or 0) for a in self.past),
        )
        self.record["budget_spent_before"] = {
            "usd": round(self.budget.spent_usd, 6),
            "hours": round(self.budget.spent_hours, 6),
        }
        if self.ranks.leader:  # the other ranks record nothing (see _finish)
            self.attempts.begin(self._progress())

    # ------------------------------------------------------------------ running

    def run(self) -> dict[str, Any]:
        # Watch first: a notice that arrives while the model is built or restored is kept
        # and acted on at the first step boundary.
        watchers = start_watchers()
        store: RunCheckpoints | None = None
        try:
            self.ranks = Ranks.from_env()
            shard = None
            if self.ranks.many:  # every rank uploads its own part (DDP, FSDP2, DeepSpeed)
                shard = ShardInfo(self.ranks.rank, self.ranks.world, self.ranks.session)
            store = RunCheckpoints(self.job, self.run_id, shard)
            self._take_leases(store)
            self._load_history(store)
            self._start_renewing(watchers.board)
        except BaseException:
            self._release_leases()
            watchers.stop()
            if store is not None:
                store.close()
            self.ranks.close()
            raise
        engine: TrainEngine | None = None
        try:
            seed_everything(self.job.training.seed)
            setup = build_setup(self.job)
            engine = open_engine(self.job, setup, self.run_dir, self.ranks)
            self.record.update(engine=engine.name, world_size=self.ranks.world)
            return self._train(engine, store, watchers)
        except RankLost as exc:  # a peer is gone: no collective can run; stop now
            log.error("%s", exc.one_line())
            self.record.update(outcome="rank-lost", error=exc.one_line())
            self._finish(store, gather=False)
            store.close(timeout=1.0)
            raise
        except (Preempted, BudgetExceeded):  # recorded already, with the work saved
            store.close(timeout=RESERVE_S)
            raise
        except BaseException as exc:
            self.record.update(outcome="failed", error=f"{exc.__class__.__name__}: {exc}")
            self._finish(store, gather=False)
            store.close(timeout=RESERVE_S)
            raise
        finally:
            watchers.stop()
            store.close()
            if engine is not None:
                engine.close()
            self._release_leases()
            self.ranks.close()

    def _train(
        self, engine: TrainEngine, store: RunCheckpoints, watchers: Watchers
    ) -> dict[str, Any]:
        start = 0
        restored = engine.restore(store)
        if restored is not None:
            start = restored
            log.info("resumed from the full checkpoint at step %d", start)
        newest = store.latest()
        if newest is not None and newest.step > start:
            log.info(
                "a newer %s checkpoint at step %d cannot be resumed exactly (no optimizer "
                "state): steps %d..%d run again",
                newest.tier,
                newest.step,
                start + 1,
                newest.step,
            )
        self.record.update(resumed_from=start, watchers=watchers.names)
        self.schedule.start_at(start)
        last_full = start if restored is not None else None
        total = self.job.training.steps
        policy = self.job.training.checkpoint
        late = sorted(n for n in self.demo.wanted if n >= total)
        if late:
            log.warning(
                "BURST_PREEMPT_AT_STEPS %s: not before the last step %d, no preemption there",
                ",".join(map(str, late)),
                total,
            )
        saves = store.committed()
        loss = float("nan")
        board = watchers.board
        ranks = self.ranks
        notice = board.stop_notice()
        if ranks.many:  # every rank acts on what any rank saw, at the same step boundary
            agreed = ranks.agree(notice, False, self._over(start) is not None)
            notice = agreed.stop
            if agreed.over_budget and start < total:
                self._over_budget(self._over_sure(start), store, engine, start, last_full)
        if notice is not None and start < total:
            self._preempt(notice, start, engine, store, last_full)
        demo_here = ranks.rank == preempt_rank(ranks.world)
        for step in range(start, total):
            if step == start:
                self._first_step(step)
            if not ranks.many:
                try:
                    self.budget.check()
                except BudgetExceeded as exc:
                    self._over_budget(exc, store, engine, step, last_full)
            t0 = time.monotonic()
            loss = engine.step(step)
            faults.pace_step(t0)
            if step == start:  # the state has its final shape now (optimizer moments)
                store.warm(engine.nbytes("full"))
            done = step + 1
            self.record["at_step"] = done
            curve = self.record.setdefault("losses", [])
            if len(curve) < LOSS_CURVE_MAX:
                curve.append(loss)
            self.schedule.record_step(time.monotonic() - t0)
            self._learn(store)
            if demo_here:
                self.demo.maybe_fire(done)
            notice = board.stop_notice()
            advisories = board.take_advisories()
            advise = bool(advisories)
            if ranks.many:
                agreed = ranks.agree(notice, advise, done < total and self._over(done) is not None)
                notice, advise = agreed.stop, agreed.advisory
                if agreed.over_budget:
                    self._over_budget(self._over_sure(done), store, engine, done, last_full)
            if notice is not None and done < total:
                self._preempt(notice, done, engine, store, last_full)
            for a in advisories:
                log.warning("advisory %s (%s): checkpointing now", a.source, a.detail)
                self.record.setdefault("advisories", []).append({**a.as_dict(), "at_step": done})
            if advise or self.schedule.due(done) or done == total:
                saves += 1
                tier = (
                    "full"
                    if saves % policy.full_every == 0
                    or done == total
                    or advise
                    or "weights" not in engine.tiers
                    else "weights"
                )
                self._save(store, engine, done, tier)
                if tier == "full":
                    last_full = done
                log.info("step %d loss %.5f: %s checkpoint handed to the writer", done, loss, tier)
        self._final_commit(store, total)
        self._learn(store)
        if ranks.many:
            self._collect_garbage(store)
        if ranks.leader:
            self._replicate(store)
        notice = board.stop_notice()
        if notice is not None:
            self.record["late_notice"] = notice.as_dict()
            log.warning("notice from %s after the last step: the run is complete", notice.source)
        self.record.update(outcome="done", ended_at_step=total)
        self._finish(store)
        doc = self._doc(store, total)
        doc.update(
            final_loss=None if math.isnan(loss) else loss,  # NaN: no step ran in this attempt
            final_weights_sha256=engine.weights_sha256(),
        )
        return doc

    def _final_commit(self, store: RunCheckpoints, total: int) -> None:
        """Wait for the last save. A worker that died after committing it (its reply lost)
        is no failure: the store says what committed (rank 0's store, for every rank). If the
        final checkpoint did not commit, the attempt ends with exit 75: requeued, it resumes
        from the last committed one (an infrastructure fault, never bad input)."""
        try:
            store.commit()
            failed: str | None = None
        except CheckpointError as exc:
            failed = exc.one_line()

        def verdict() -> str | None:
            latest = store.latest("full")
            if latest is not None and latest.step == total:
                if failed:
                    log.warning("%s; the final checkpoint committed nevertheless", failed)
                return None
            return failed or f"no full checkpoint of the last step {total} in the store"

        problem = self.ranks.decide(verdict)
        if problem is None:
            return
        self.record.update(outcome="final-save-lost", ended_at_step=total, error=problem)
        self._finish(store)
        stop = Preempted(
            f"the final checkpoint (step {total}) did not commit: {problem}; exit 75 to "
            "requeue from the last committed one"
        )
        stop.doc = self._doc(store, total)  # type: ignore[attr-defined]
        raise stop

    def _over(self, step: int) -> BudgetExceeded | None:
        """This rank's budget check."""
        try:
            self.budget.check()
        except BudgetExceeded as exc:
            return exc
        return None

    def _over_sure(self, step: int) -> BudgetExceeded:
        """The ranks agreed the budget is exceeded: this rank's reason, or its peer's."""
        return self._over(step) or BudgetExceeded(
            f"budget exceeded (found by another rank at step {step})"
        )

    def _collect_garbage(self, store: RunCheckpoints) -> None:
        """Sharded: chunks of expired checkpoints go now, every rank's writer idle (none
        deletes chunks while another rank may be uploading; see burst.checkpoint.worker)."""
        self.ranks.barrier()
        if not self.ranks.leader:
            return
        try:
            res = store.mgr.collect_garbage(grace=0.0, retention=False)
        except CheckpointError as exc:
            log.warning("GC of the sharded checkpoints failed: %s", exc.one_line())
            return
        log.info("GC after the run: %d unreferenced chunks removed", res["deleted_chunks"])

    def _replicate(self, store: RunCheckpoints) -> None:
        """Copy the final checkpoint to the second store (``storage.replica_uri``, e.g. another
        region), checksums verified on arrival; only the chunks it lacks travel. A failure is
        recorded and logged loudly: the training itself is done and safe in the first store."""
        replica = self.job.storage.replica_uri
        url = run_url(replica, self.run_id) if replica else None
        latest = store.latest()
        if url is None or latest is None:
            return
        try:
            res = store.mgr.replicate_to(url, steps=[latest.step])
            # The claim "a second copy exists" rests on reading it back: chunks the replica
            # already held were not copied, so every chunk of the copy is checked there.
            check = verify_checkpoint(open_store(url), latest)
            if not check.ok:
                raise CheckpointError(f"the copy does not verify: {check.problem()}", where=url)
        except (CheckpointError, BurstError, OSError) as exc:
            log.error("replication to %s failed: %s", url, exc)
            self.record["replica"] = {"store": url, "step": latest.step, "error": str(exc)}
            return
        self.record["replica"] = {
            "store": url,
            "step": latest.step,
            "copied_chunks": res.copied_chunks,
            "copied_bytes": res.copied_bytes,
            "verified": True,
        }
        log.info(
            "checkpoint %d replicated to %s (%d bytes sent)", latest.step, url, res.copied_bytes
        )

    def _first_step(self, step: int) -> None:
        emit(log, FIRST_TRAIN_STEP, train_step=step + 1, attempt=self.record["attempt"])
        t = submitted_at()
        if t is not None and self.record["attempt"] == 1:  # submit to the first training step
            self.metrics.set_gpu_wait(max(0.0, time.time() - t))

    def _over_budget(
        self,
        exc: BudgetExceeded,
        store: RunCheckpoints,
        engine: TrainEngine,
        step: int,
        last_full: int | None,
    ) -> None:
        """Stop: keep the work (a full checkpoint, so a larger budget can resume it), record
        why, and let teardown follow (exit 3)."""
        log.error("%s: stopping the run", exc.message)
        if step > 0 and last_full != step:
            self._save(store, engine, step, "full")
        try:
            store.commit(60.0)
        except (CheckpointError, StoreError) as err:
            log.error("the last checkpoint before stopping did not commit: %s", err.one_line())
        self._learn(store)
        self.record.update(outcome="budget-exceeded", ended_at_step=step, error=exc.message)
        self._finish(store)
        exc.doc = self._doc(store, step)  # type: ignore[attr-defined]
        raise exc

    def _save(self, store: RunCheckpoints, engine: TrainEngine, step: int, tier: str) -> float:
        self.record["saving_step"] = step
        blocked = engine.save(store, step, tier)
        self.schedule.saved_at(step)
        self._learn(store)
        return blocked

    def _learn(self, store: RunCheckpoints) -> None:
        """Take the measured costs of the commits that finished in the background."""
        for res in store.completed():
            blocking_s, upload_s = res.stall_seconds, res.seconds
            self.mine["checkpoint_bytes"] += res.total_bytes
            self.mine["uploaded_bytes"] += res.uploaded_bytes
            self.mine["stall_s"] += blocking_s
            self.meter.record(res.total_bytes, res.uploaded_bytes, blocking_s, upload_s)
            self.schedule.record_save(blocking_s, upload_s)
            self.metrics.record_checkpoint(res.tier, res.total_bytes, blocking_s + upload_s)
            self.metrics.record_stall(blocking_s)
            emit(
                log,
                CHECKPOINT,
                train_step=res.step,
                tier=res.tier,
                bytes=res.total_bytes,
                uploaded_bytes=res.uploaded_bytes,
            )
            log.info(
                "checkpoint step %d (%s) committed: %d bytes, blocked %.4fs, upload %.4fs",
                res.step,
                res.tier,
                res.total_bytes,
                blocking_s,
                upload_s,
            )

    def _preempt(
        self,
        notice: Notice,
        step: int,
        engine: TrainEngine,
        store: RunCheckpoints,
        last_full: int | None,
    ) -> None:
        """Save what fits before the deadline, record the attempt, raise Preempted."""
        left = notice.seconds_left()
        self.metrics.record_preemption()
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
            costs = self.meter.costs(
                full_bytes=full_bytes,
                # an engine without a weights tier: weights-only costs a full save, so the
                # choice is full if it fits, else the last committed checkpoint
                weights_bytes=engine.nbytes("weights") if "weights" in engine.tiers else full_bytes,
                pending_s=self.meter.last_upload_s if store.busy() else 0.0,
            )
            return choose_emergency_save(left, costs).as_dict()

        # several ranks: rank 0's measurements decide, every rank saves its part of that tier
        emergency: dict[str, Any] = self.ranks.decide(choose)
        if emergency["tier"] != "none":
            emergency.update(self._emergency_save(store, engine, step, emergency["tier"], notice))
        try:  # a save still in flight commits, or not, before the deadline too
            store.commit(
                None
                if notice.deadline is None
                else max(0.05, notice.deadline - time.time() - RESERVE_S)
            )
        except (CheckpointError, StoreError) as exc:
            emergency.setdefault("error", exc.one_line())
        self._learn(store)
        if self.ranks.many:  # rank 0's worker committed the global manifest, or did not
            emergency.update(
                self.ranks.decide(
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
        self.record.update(
            outcome="preempted",
            preempted=True,
            ended_at_step=step,
            notice=notice.as_dict(),
            emergency_save=emergency,
            notice_to_exit_s=round(time.time() - notice.received_at, 3),
        )
        self._finish(store)
        stop = Preempted(
            f"preempted at step {step} by {notice.source}; emergency save: "
            f"{outcome}; exit 75 to requeue"
        )
        stop.doc = self._doc(store, step)  # type: ignore[attr-defined]
        raise stop

    def _emergency_save(
        self, store: RunCheckpoints, engine: TrainEngine, step: int, tier: str, notice: Notice
    ) -> dict[str, Any]:
        started = time.monotonic()
        self._save(store, engine, step, tier)
        budget = (
            None
            if notice.deadline is None
            else max(0.05, notice.deadline - time.time() - RESERVE_S)
        )
        try:
            store.commit(budget)
        except (CheckpointError, StoreError) as exc:
            return {"committed": False, "error": exc.one_line()}
        committed_at = time.time()
        return {
            "committed": True,
            "committed_step": step,
            "seconds": round(time.monotonic() - started, 6),
            "committed_at": committed_at,
            "before_deadline": notice.deadline is None or committed_at <= notice.deadline,
        }

    # ------------------------------------------------------------------ records

    def _finish(self, store: RunCheckpoints, gather: bool = True) -> None:
        """Record the attempt (rank 0: every rank's checkpoint figures gathered first, when
        every rank gets here; the others record nothing)."""
        if self.ranks.many:
            mine = {
                "rank": self.ranks.rank,
                **{k: round(v, 6) if isinstance(v, float) else v for k, v in self.mine.items()},
            }
            self.record["ranks"] = self.ranks.gather(mine) if gather else [mine]
            if not self.ranks.leader:
                return
        cost = self.budget.cost_usd() - self.budget.spent_usd
        hours = self.budget.hours() - self.budget.spent_hours
        self.record.update(cost_usd=round(cost, 6), hours=round(hours, 6))
        self.metrics.set_cost("compute", self.budget.cost_usd())
        try:
            export_from_env(self.metrics, self.run_dir, "train", self.record.get("attempt"))
        except OSError as exc:  # metrics must never cost the run
            log.warning("could not write the train metrics: %s", exc)
        self.record.update(
            finished_at=utcnow_iso(),
            commits=self.meter.commits,
            save_failures=store.failures,
            measured=self.schedule.measured(),
            checkpoint_retries=list(store.mgr.retries),
            save_meter=self.meter.as_dict(),
            checkpoint_interval=self.schedule.describe(),
        )
        self.attempts.append(self.record)

    def _doc(self, store: RunCheckpoints, step: int) -> dict[str, Any]:
        attempts = [*self.past, self.record]
        summary = [
            {
                k: a.get(k)
                for k in (
                    "attempt",
                    "resumed_from",
                    "ended_at_step",
                    "preempted",
                    "outcome",
                    "notice",
                    "emergency_save",
                    "advisories",
                    "commits",
                    "killed",
                    "cost_usd",
                    "hours",
                    "started_at",
                    "finished_at",
                    "world_size",
                    "ranks",
                    "notice_to_exit_s",
                    "losses",
                )
            }
            for a in attempts
        ]
        for entry in summary:  # only a killed attempt says so (the field is a bool)
            if not entry.get("killed"):
                entry.pop("killed", None)
        return {
            "final_step": step,
            "resumed_from": self.record.get("resumed_from"),
            "checkpoints": sum(int(a.get("commits") or 0) for a in attempts),
            "checkpoints_retained": store.committed(),
            "checkpoint_store": store.location,
            "checkpoint_interval": self.schedule.describe(),
            "preemptions": sum(1 for a in attempts if a.get("preempted")),
            "killed_attempts": sum(1 for a in attempts if a.get("killed")),
            "cost_usd": round(sum(float(a.get("cost_usd") or 0) for a in attempts), 6),
            "usd_per_hour": self.record.get("usd_per_hour"),
            "attempts": summary,
            "watchers": self.record.get("watchers"),
            "replica": self.record.get("replica"),
            "world_size": self.ranks.world,
            "ranks": self.record.get("ranks"),
            "notice_to_exit_s": self.record.get("notice_to_exit_s"),
        }


def train(
    job: BurstJob,
    run_id: str,
    run_dir: Path,
    plan: dict[str, Any] | None = None,
    infra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return TrainRun(job, run_id, run_dir, plan, infra).run()
