"""The resilient training loop: one attempt of the train step.

Deterministic (seeded RNGs, deterministic algorithms, batches a pure function of the step),
checkpointing on a schedule (``burst.train.schedule``) through the checkpoint engine
(asynchronous: training is blocked only while the state is copied to a host buffer), resuming
from the latest FULL checkpoint with model, optimizer, scheduler, RNG states and data
position. At every step boundary it reads the preemption notice board (``burst.preempt``): on
a stop notice it saves what fits in the time left and raises ``Preempted`` (exit 75, requeue;
``burst.train.preemption``); an advisory notice (rebalance) makes it checkpoint now and carry
on.

The parts, each in its own module: the optimizer step and the engine's own saving and
restoring (``burst.train.engine``: plain torch, DDP, FSDP2, DeepSpeed); the trainer lease and
heartbeat (``leases``); the attempt records and the step document (``records``); the budget
(``spending``); the emergency save (``preemption``); the final commit, GC and replication
(``wrapup``). A strategy that synchronises with others (regional sync) is a hook of this loop
(``burst.train.hooks``), never a loop of its own; a user's own program (``training.command``)
is a mode of it: the same attempt, store, writer and notices, with a supervisor in place of
the steps (``burst.program.supervise``, which sits above this package: the train step passes
it in, as a hook is passed in).
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from burst import faults
from burst.admission.kueue_watch import kueue_watcher
from burst.budget import BudgetExceeded
from burst.checkpoint.sharded import ShardInfo
from burst.documents import PlanDocument, ProvisionDocument, TrainDocument
from burst.documents.base import Detail
from burst.documents.train import Notice as NoticeRecord
from burst.documents.train import TrainAttempt
from burst.errors import BurstError, CheckpointError, Preempted
from burst.obs.events import FIRST_TRAIN_STEP, emit
from burst.obs.metrics import RunMetrics
from burst.preempt.emergency import RESERVE_S
from burst.preempt.notice import Notice
from burst.preempt.watch import Watchers, start_watchers
from burst.settings import current
from burst.spec import BurstJob
from burst.storage.base import ObjectStore, StoreError
from burst.train import endings, spot_probe, wrapup
from burst.train.checkpoints import RunCheckpoints, SaveAbandoned, StoreDown
from burst.train.endings import ProgramFailed
from burst.train.engine import TrainEngine, open_engine
from burst.train.hooks import Interrupted, LoopHook
from burst.train.leases import TrainerLeases
from burst.train.preemption import preempt
from burst.train.ranks import RankLost, Ranks, preempt_rank, under_torchrun
from burst.train.records import AttemptRecords
from burst.train.setup import build_setup
from burst.train.spending import over, over_sure
from burst.train.spot_probe import SpotMover
from burst.train.tiers import for_rank, local_servers

log = logging.getLogger(__name__)

#: a mode that runs the attempt in place of the loop's steps (``training.command``'s
#: supervisor): the attempt, the run's checkpoints and the notice watchers, opened
Supervise = Callable[["TrainRun", RunCheckpoints, Watchers], TrainDocument]


def submitted_at() -> float | None:
    """When the run was submitted (``BURST_SUBMITTED_AT``: epoch seconds or ISO 8601, set by
    the local runner and by the workflow), for the GPU wait metric."""
    import datetime as dt

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


def seed_everything(seed: int) -> None:
    # torch imported here, not with the module: in its program mode (a user's own program
    # trains in a process of its own) this loop never needs it
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


class TrainRun:
    """One attempt of the train step. ``store``: the run's store when it is not the spec's
    ``storage.checkpoint_uri`` (a regional worker's own state); ``hook``: a strategy that
    synchronises at boundaries (``burst.train.hooks``); ``supervise``: the mode that runs a
    user's own program (``training.command``) in place of the steps; ``heartbeat_role``: the name of
    this trainer's heartbeat; ``heartbeat_dir``: the directory of the run whose driver
    heartbeat it follows, when ``run_dir`` is not it (a regional worker's scratch)."""

    def __init__(
        self,
        job: BurstJob,
        run_id: str,
        run_dir: Path,
        plan: PlanDocument | None = None,
        infra: ProvisionDocument | None = None,
        *,
        store: ObjectStore | None = None,
        hook: LoopHook | None = None,
        supervise: Supervise | None = None,
        heartbeat_role: str = "trainer",
        heartbeat_dir: Path | None = None,
    ) -> None:
        self.job = job
        self.run_id = run_id
        self.run_dir = run_dir
        self.plan = plan
        self.infra = infra
        self.own_store = store
        self.hook = hook
        self.supervise = supervise
        self.heartbeat_role = heartbeat_role
        self.heartbeat_dir = heartbeat_dir or run_dir
        self.metrics = RunMetrics.for_job(run_id, job)
        self.demo = faults.demo_preemptions(run_dir / "preempt-demo.json")
        self.ranks = Ranks()
        self.records = AttemptRecords(job, run_dir, self.ranks, self.metrics, plan, infra)
        self.leases = TrainerLeases(run_id, self.heartbeat_dir, True, heartbeat_role)
        # the memory tiers' servers (None: BURST_PEER_ADDRESSES, burst.train.tiers)
        self.peer_addresses: list[str] | None = None

    @property
    def record(self) -> TrainAttempt:
        return self.records.record

    # ------------------------------------------------------------------ running

    def run(self) -> TrainDocument:
        # Watch first: a notice that arrives while the model is built or restored is kept
        # and acted on at the first step boundary.
        watchers = start_watchers(extra=(kueue_watcher,))  # (+ a Kueue eviction)
        store: RunCheckpoints | None = None
        try:
            self.ranks = Ranks.from_env()
            self.records = AttemptRecords(
                self.job, self.run_dir, self.ranks, self.metrics, self.plan, self.infra
            )
            self.leases = TrainerLeases(
                self.run_id, self.heartbeat_dir, self.ranks.leader, self.heartbeat_role
            )
            shard = None
            if self.ranks.many:  # every rank uploads its own part (DDP, FSDP2, DeepSpeed)
                shard = ShardInfo(self.ranks.rank, self.ranks.world, self.ranks.session)
            tiers = None
            if self.own_store is None:  # (a regional worker's own store has no tiers)
                tiers = for_rank(
                    self.job,
                    self.ranks.rank,
                    self.ranks.world,
                    self.plan,
                    self.infra,
                    self.peer_addresses,
                )
            store = RunCheckpoints(self.job, self.run_id, shard, self.own_store, tiers)
            store.board = watchers.board
            self.leases.take(store.mgr.store)
            self.records.open(store)
            self.leases.keep(watchers.board, self.records.keep_alive)
        except BaseException:
            self.leases.release()
            watchers.stop()
            if store is not None:
                store.close()
            self.ranks.close()
            raise
        engine: TrainEngine | None = None
        try:
            if self.job.training.own_program:  # training.command: the user's program trains
                if self.supervise is None:
                    raise BurstError(
                        "training.command: the train step started the loop without the "
                        "program supervisor (a bug: please report it)"
                    )
                return self.supervise(self, store, watchers)
            seed_everything(self.job.training.seed)
            setup = build_setup(self.job)
            engine = open_engine(self.job, setup, self.run_dir, self.ranks)
            if self.hook is not None:
                board = watchers.board
                engine = self.hook.wrap(engine, lambda: board.stop_notice() is not None)
            self.record.engine = engine.name
            self.record.world_size = self.ranks.world
            return self._train(engine, store, watchers)
        except RankLost as exc:  # a peer is gone: no collective can run; stop now
            log.error("%s", exc.one_line())
            self.record.outcome = "rank-lost"
            self.record.error = exc.one_line()
            self.records.finish(store, gather=False)
            store.close(timeout=1.0)
            raise
        except Preempted:  # recorded already; the emergency save waited as long as the
            # notice allowed: a save still in flight is left to the writer, not waited for
            # again (a second RESERVE_S here outlived the deadline: benchmarks/notice_window.py)
            store.close(timeout=0.0)
            raise
        except (BudgetExceeded, StoreDown, ProgramFailed):  # recorded already
            store.close(timeout=RESERVE_S)
            raise
        except BaseException as exc:
            self.record.outcome = "failed"
            self.record.error = f"{exc.__class__.__name__}: {exc}"
            self.records.finish(store, gather=False)
            store.close(timeout=RESERVE_S)
            raise
        finally:
            watchers.stop()
            store.close()
            if engine is not None:
                engine.close()
            self.leases.release()
            self.ranks.close()

    def _restore(
        self, engine: TrainEngine, store: RunCheckpoints, watchers: Watchers
    ) -> tuple[int, bool]:
        """Where this attempt starts (0, or the step of the checkpoint it resumed), and
        whether it resumed one."""
        try:
            restored = engine.restore(store)
        except Interrupted as exc:  # (a hook waiting for its first input)
            log.warning("%s", exc.one_line())
            self._preempt_now(watchers, 0, engine, store, 0)
            raise  # (unreachable: _preempt_now raises)
        start = 0 if restored is None else restored
        if restored is not None:
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
        self.record.resumed_from = start
        if restored is not None and self.job.training.checkpoint.memory_tiers.enabled:
            self.record.restored_from_tier = store.restored_from
            log.info("the checkpoint of step %d was read from %s", start, store.restored_from)
        self.record.watchers = watchers.names
        if self.ranks.leader:  # a record left open by a kill from here on says where it began
            self.records.keep_alive()
        self.records.schedule.start_at(start)
        return start, restored is not None

    def _train(
        self, engine: TrainEngine, store: RunCheckpoints, watchers: Watchers
    ) -> TrainDocument:
        began = time.monotonic()
        start, resumed = self._restore(engine, store, watchers)
        restore_s = time.monotonic() - began if resumed else 0.0
        last_full = start if resumed else None
        # an on-demand fallback probes spot at checkpoint boundaries (docs/preemption.md)
        mover = SpotMover.for_attempt(
            self.job, self.plan, self.infra, self.run_dir, past=self.records.past
        )
        total = self.job.training.steps
        policy = self.job.training.checkpoint
        schedule = self.records.schedule
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
        hook = self.hook
        notice = board.stop_notice()
        if ranks.many:  # every rank acts on what any rank saw, at the same step boundary
            agreed = ranks.agree(notice, False, over(self.records.guard) is not None)
            notice = agreed.stop
            if agreed.over_budget and start < total:
                self._over_budget(
                    over_sure(self.records.guard, start), store, engine, start, last_full
                )
        if notice is not None and start < total:
            self._preempt(notice, start, engine, store, last_full)
        demo_here = ranks.rank == preempt_rank(ranks.world)
        step = start
        while step < total:
            if step == start:
                self._first_step(step)
            if not ranks.many:
                try:
                    self.records.guard.check()
                except BudgetExceeded as exc:
                    self._over_budget(exc, store, engine, step, last_full)
            t0 = time.monotonic()
            loss = engine.step(step)
            faults.pace_step(t0)
            if step == start:  # the state has its final shape now (optimizer moments)
                store.warm(engine.nbytes("full"))
            done = step + 1
            self.records.step_done(done, loss)
            schedule.record_step(time.monotonic() - t0)
            self.records.learn(store)
            if demo_here:
                self.demo.maybe_fire(done)
            # (several ranks: rank 0's writer commits the global manifest, its verdict)
            down = ranks.decide(store.down_for_good) if ranks.many else store.down_for_good()
            if down is not None and done < total:
                self._store_down(down, store, done)
            notice = board.stop_notice()
            advisories = board.take_advisories()
            advise = bool(advisories)
            if ranks.many:
                agreed = ranks.agree(
                    notice, advise, done < total and over(self.records.guard) is not None
                )
                notice, advise = agreed.stop, agreed.advisory
                if agreed.over_budget:
                    self._over_budget(
                        over_sure(self.records.guard, done), store, engine, done, last_full
                    )
            if notice is not None and done < total:
                self._preempt(notice, done, engine, store, last_full)
            for a in advisories:
                log.warning("advisory %s (%s): checkpointing now", a.source, a.detail)
                seen = Detail.model_validate({**a.as_dict(), "at_step": done})
                self.record.advisories = [*(self.record.advisories or []), seen]
            boundary = hook is not None and hook.boundary(done)
            due = boundary if hook is not None else schedule.due(done)
            if advise or due or done == total:
                saves += 1
                tier = (
                    "full"
                    if saves % policy.full_every == 0
                    or done == total
                    or advise
                    or boundary
                    or "weights" not in engine.tiers
                    else "weights"
                )
                if self._save(store, engine, done, tier) and tier == "full":
                    last_full = done
                log.info("step %d loss %.5f: %s checkpoint handed to the writer", done, loss, tier)
            if mover is not None and due and done < total:
                last_full = self._back_to_spot(mover, store, engine, done, last_full, restore_s)
            step = done
            if boundary and hook is not None:
                try:
                    step = hook.advance(done)
                except Interrupted as exc:
                    log.warning("%s", exc.one_line())
                    self._preempt_now(watchers, done, engine, store, last_full)
                if step >= total > done:  # the run ended in rounds this worker skipped
                    step = total
                    self.records.step_done(total, loss)
                    if self._save(store, engine, total, "full"):
                        last_full = total
        wrapup.final_commit(store, total, ranks, self.records)
        self.records.learn(store)
        if ranks.many:
            wrapup.collect_garbage(store, ranks)
        if ranks.leader:
            replica = wrapup.replicate(self.job, self.run_id, store)
            if replica is not None:
                self.record.replica = Detail.model_validate(replica)
        notice = board.stop_notice()
        if notice is not None:
            self.record.late_notice = NoticeRecord.model_validate(notice.as_dict())
            log.warning("notice from %s after the last step: the run is complete", notice.source)
        return endings.done(
            self.records,
            store,
            total,
            final_loss=None if math.isnan(loss) else loss,  # NaN: no step ran in this attempt
            final_weights_sha256=engine.weights_sha256(),
        )

    def _first_step(self, step: int) -> None:
        emit(log, FIRST_TRAIN_STEP, train_step=step + 1, attempt=self.record.attempt)
        t = submitted_at()
        if t is not None and self.record.attempt == 1:  # submit to the first training step
            self.metrics.set_gpu_wait(max(0.0, time.time() - t))

    def _back_to_spot(
        self,
        mover: SpotMover,
        store: RunCheckpoints,
        engine: TrainEngine,
        done: int,
        last_full: int | None,
        restore_s: float,
    ) -> int | None:
        """At a checkpoint boundary of an on-demand fallback: probe spot when due and, when
        the rule says move, commit a full checkpoint of ``done`` and end the attempt
        (``burst.train.spot_probe.move``: exit 75). Returns the last full checkpoint's step."""
        full = engine.nbytes("full")
        total = self.job.training.steps

        def choose() -> dict[str, Any] | None:
            save_s = self.records.meter.costs(full_bytes=full, weights_bytes=full).estimate_s(
                "full"
            )
            step_s = self.records.schedule.step_s or 0.0
            return mover.check((total - done) * step_s, save_s, restore_s, full)

        decision = self.ranks.decide(choose)
        if decision is not None and decision.get("decision") != "move":  # stays: recorded
            self.record.spot_probe = Detail.model_validate(
                {**decision, "at_step": done, "probes": mover.probes}
            )
        if decision is None or decision.get("decision") != "move":
            return last_full
        if last_full != done:
            if not self._save(store, engine, done, "full"):
                return last_full
            last_full = done
        spot_probe.move(self.records, store, self.ranks, done, decision)
        return last_full

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
        endings.over_budget(self.records, store, exc, step)

    def _store_down(self, why: str, store: RunCheckpoints, step: int) -> None:
        """Stop training: the store has refused every save for longer than the retry window
        (``burst.train.endings.store_down``: exit 4)."""
        endings.store_down(self.records, store, why, step)

    def _save(self, store: RunCheckpoints, engine: TrainEngine, step: int, tier: str) -> bool:
        """A routine save; False when a stop notice cut short the wait for the save before
        it (the loop then acts on the notice at the step boundary)."""
        self.record.saving_step = step
        try:
            engine.save(store, step, tier)
        except SaveAbandoned as exc:
            log.warning("checkpoint of step %d not taken: %s", step, exc.one_line())
            return False
        self.records.schedule.saved_at(step)
        self.records.learn(store)
        return True

    def _emergency_save(
        self, store: RunCheckpoints, engine: TrainEngine, step: int, tier: str
    ) -> float:
        self.record.saving_step = step
        blocked = engine.save(store, step, tier)  # SaveAbandoned: past the notice's deadline
        self.records.schedule.saved_at(step)
        self.records.learn(store)
        return blocked

    def _preempt(
        self,
        notice: Notice,
        step: int,
        engine: TrainEngine,
        store: RunCheckpoints,
        last_full: int | None,
    ) -> None:
        preempt(
            notice,
            step,
            engine,
            store,
            last_full,
            self.records,
            self.ranks,
            lambda at, tier: self._emergency_save(store, engine, at, tier),
        )

    def _preempt_now(
        self,
        watchers: Watchers,
        step: int,
        engine: TrainEngine,
        store: RunCheckpoints,
        last_full: int | None,
    ) -> None:
        """A hook's wait ended on a stop notice at ``step`` (its state saved already)."""
        notice = watchers.board.stop_notice()
        assert notice is not None
        self._preempt(notice, step, engine, store, last_full)


def train(
    job: BurstJob,
    run_id: str,
    run_dir: Path,
    plan: PlanDocument | None = None,
    infra: ProvisionDocument | None = None,
    supervise: Supervise | None = None,
) -> TrainDocument:
    if under_torchrun():  # (the step that started the ranks started their servers)
        return TrainRun(job, run_id, run_dir, plan, infra, supervise=supervise).run()
    with local_servers(job, {}) as addresses:  # one rank: its node's server, if enabled
        run = TrainRun(job, run_id, run_dir, plan, infra, supervise=supervise)
        run.peer_addresses = addresses
        return run.run()
