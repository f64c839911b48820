"""What one attempt of the train step knows and records: the earlier attempts and what they
measured, this attempt's record (``burst.documents.TrainAttempt``), its checkpoint figures,
and the step document it ends with.

The train loop (``burst.train.loop``) writes into ``record`` (a ``TrainAttempt``, typed: JSON
only where it is written, ``burst.attempt_records``) as it goes; this module opens the
record when the attempt starts, learns the cost of every background commit, closes the record
when the attempt ends (rank 0 gathers every rank's figures first) and assembles the document.
"""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

from burst.attempt_records import FILE_NAME, budget_sources, next_number, sources
from burst.budget import BudgetGuard, rented_gpus
from burst.documents import PlanDocument, ProvisionDocument, TrainDocument, produce
from burst.documents.train import CheckpointInterval, RankFigures, TrainAttempt
from burst.lease import iso
from burst.obs.events import CHECKPOINT, emit
from burst.obs.metrics import RunMetrics, export_from_env
from burst.preempt.emergency import SaveMeter
from burst.preempt.signals import watching_since
from burst.recovery import RESTART, check_budgets
from burst.runs import utcnow_iso
from burst.spec import BurstJob
from burst.storage.base import StoreError
from burst.train.attempts import AttemptLog
from burst.train.checkpoints import RunCheckpoints
from burst.train.ranks import Ranks
from burst.train.schedule import CheckpointSchedule, running_candidate
from burst.train.spending import hourly_rate, open_budget

log = logging.getLogger(__name__)

#: the per-step losses an attempt record keeps (its first steps; a long run's curve is metrics)
LOSS_CURVE_MAX = 2000

#: the fields of each attempt the step document summarises
SUMMARY_FIELDS = (
    "attempt",
    "resumed_from",
    "restored_from_tier",
    "ended_at_step",
    "preempted",
    "outcome",
    "recovery_source",
    "notice",
    "emergency_save",
    "back_to_spot",
    "spot_probe",
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
    "program",
)


class AttemptRecords:
    """The records of one attempt: opened by ``open``, closed by ``finish``."""

    def __init__(
        self,
        job: BurstJob,
        run_dir: Path,
        ranks: Ranks,
        metrics: RunMetrics,
        plan: PlanDocument | None = None,
        infra: ProvisionDocument | None = None,
    ) -> None:
        self.job = job
        self.run_dir = run_dir
        self.ranks = ranks
        self.metrics = metrics
        self.plan = plan
        self.infra = infra
        # the attempt started with its step, which takes notices from then on: a cancel
        # while it started (its marker) is this attempt's
        since = watching_since()
        self.record = TrainAttempt(
            started_at=utcnow_iso() if since is None else iso(since), preempted=False
        )
        # this rank's own checkpoint figures (the leader gathers every rank's at the end)
        self.mine = RankFigures(rank=ranks.rank, checkpoint_bytes=0, uploaded_bytes=0, stall_s=0.0)
        self.past: list[TrainAttempt] = []
        self.attempts: AttemptLog | None = None
        self.meter = SaveMeter()
        self.schedule = CheckpointSchedule.for_job(job, plan, None, infra)
        self.budget: BudgetGuard | None = None

    def open(self, store: RunCheckpoints) -> None:
        """Earlier attempts (from the run's store, shared by every pod of the run) and the
        costs they measured, so this attempt starts with what they learned; then this
        attempt's record, opened (rank 0 only: the other ranks record nothing)."""
        self.attempts = AttemptLog(self.run_dir / FILE_NAME, store.mgr.store)
        # a record left open belongs to an attempt that died: it counts (cost, preemption);
        # the two recovery budgets are checked here, in every path's train step
        placed = self.infra.recovery if self.infra is not None else None
        self.past = self.attempts.past(
            after_restart=placed is not None and placed.event == RESTART,
            restarts=placed.restarts if placed is not None else 0,
        )
        check_budgets(self.job.compute.recovery, budget_sources(self.past))
        closed = [a for a in self.past if a.outcome != "died"]
        last = closed[-1] if closed else None
        self.meter = SaveMeter.from_dict(last.save_meter if last else None)
        self.schedule = CheckpointSchedule.for_job(
            self.job, self.plan, last.measured if last else None, self.infra
        )
        self.record.attempt = next_number(self.past)
        rate = hourly_rate(self.infra, self.plan)
        if rate is None:
            log.warning("no price for what this run rents: only budget.max_hours is guarded")
        self.record.usd_per_hour = rate
        self.record.gpus = rented_gpus(self.job, running_candidate(self.plan, self.infra))
        self.budget = open_budget(self.job, rate, self.past, self.infra)
        self.record.budget_spent_before = {
            "usd": round(self.budget.spent_usd, 6),
            "hours": round(self.budget.spent_hours, 6),
        }
        if self.ranks.leader:
            self.attempts.close_dead()
            self.attempts.begin(self.progress())

    @property
    def guard(self) -> BudgetGuard:
        assert self.budget is not None, "open() first"
        return self.budget

    def progress(self) -> TrainAttempt:
        """The open record as it stands (cost so far), for the renewals."""
        now: dict[str, Any] = {}
        if self.budget is not None:
            now.update(
                cost_usd=round(self.budget.cost_usd() - self.budget.spent_usd, 6),
                hours=round(self.budget.hours() - self.budget.spent_hours, 6),
            )
        now["last_seen_at"] = utcnow_iso()
        return self.record.model_copy(update=now)

    def keep_alive(self) -> None:
        """Bring the open record up to date (a killed attempt still counts, with its cost)."""
        if self.attempts is not None:
            self.attempts.update(self.progress())

    def step_done(self, done: int, loss: float) -> None:
        self.record.at_step = done
        if self.record.losses is None:
            self.record.losses = []
        curve = self.record.losses
        if len(curve) < LOSS_CURVE_MAX:
            curve.append(loss)

    def learn(self, store: RunCheckpoints) -> None:
        """Take the measured costs of the commits that finished in the background."""
        for res in store.completed():
            blocking_s, upload_s = res.stall_seconds, res.seconds
            mine = self.mine
            mine.checkpoint_bytes = (mine.checkpoint_bytes or 0) + res.total_bytes
            mine.uploaded_bytes = (mine.uploaded_bytes or 0) + res.uploaded_bytes
            mine.stall_s = (mine.stall_s or 0.0) + blocking_s
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

    def finish(self, store: RunCheckpoints, gather: bool = True) -> None:
        """Record the attempt (rank 0: every rank's checkpoint figures gathered first, when
        every rank gets here; the others record nothing)."""
        if self.ranks.many:
            mine = self.mine.model_copy(update={"stall_s": round(self.mine.stall_s or 0.0, 6)})
            # across the process group as JSON objects (the figures of other processes)
            sent = mine.model_dump(mode="json")
            got = self.ranks.gather(sent) if gather else [sent]
            self.record.ranks = [RankFigures.model_validate(m) for m in got]
            if not self.ranks.leader:
                return
        budget = self.guard
        cost = budget.cost_usd() - budget.spent_usd
        hours = budget.hours() - budget.spent_hours
        self.record.cost_usd = round(cost, 6)
        self.record.hours = round(hours, 6)
        self.metrics.set_cost("compute", budget.cost_usd())
        try:
            export_from_env(self.metrics, self.run_dir, "train", self.record.attempt)
        except OSError as exc:  # metrics must never cost the run
            log.warning("could not write the train metrics: %s", exc)
        rec = self.record
        rec.finished_at = utcnow_iso()
        rec.commits = self.meter.commits
        rec.save_failures = store.failures
        rec.measured = self.schedule.measured()
        rec.checkpoint_retries = list(store.mgr.retries)
        rec.save_meter = dict(self.meter.as_dict())
        rec.checkpoint_interval = CheckpointInterval.model_validate(self.schedule.describe())
        assert self.attempts is not None
        self.attempts.append(self.record)

    def doc(self, store: RunCheckpoints, step: int, **extra: Any) -> TrainDocument:
        """The train step's document at ``step`` (``extra``: the fields of a finished run)."""
        attempts = [*self.past, self.record]
        summary = [{k: a.to_json().get(k) for k in SUMMARY_FIELDS} for a in attempts]
        for entry in summary:  # only a killed attempt says so (the field is a bool)
            if not entry.get("killed"):
                entry.pop("killed", None)
            if entry.get("restored_from_tier") is None:  # (memory tiers only)
                entry.pop("restored_from_tier", None)
        return produce(
            TrainDocument,
            {
                "final_step": step,
                "resumed_from": self.record.resumed_from,
                "checkpoints": sum(int(a.commits or 0) for a in attempts),
                "checkpoints_retained": _retained(store),
                "checkpoint_store": store.location,
                "checkpoint_interval": self.schedule.describe(),
                "preemptions": sum(1 for a in attempts if a.preempted),
                "killed_attempts": sum(1 for a in attempts if a.killed),
                "recovery_sources": dict(Counter(s for s in sources(attempts) if s)) or None,
                "cost_usd": round(sum(float(a.cost_usd or 0) for a in attempts), 6),
                "usd_per_hour": self.record.usd_per_hour,
                "attempts": summary,
                "watchers": self.record.watchers,
                "replica": self.record.replica,
                "world_size": self.ranks.world,
                "ranks": self.record.ranks,
                "notice_to_exit_s": self.record.notice_to_exit_s,
                **extra,
            },
        )


def _retained(store: RunCheckpoints) -> int | None:
    """Checkpoints in the store; None when it cannot be read (a store that is down)."""
    try:
        return store.committed()
    except StoreError as exc:
        log.warning("cannot count the checkpoints in %s: %s", store.location, exc.one_line())
        return None
