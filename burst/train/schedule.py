"""When to checkpoint: the spec's ``interval_steps``, or Young/Daly from measured costs.

With ``interval_steps: auto`` the interval is ``sqrt(2 * C * MTBF)`` (Young 1974; Daly 2006 to
first order; the planner's ``burst.plan.interval``), where C is the measured *blocking* cost
of one checkpoint (the time training stops) and MTBF the expected time between preemptions of
the job on the chosen capacity. It is never shorter than the measured background upload time
(a checkpoint must finish before the next one starts). The first checkpoint of an attempt is
taken after ``PROBE_STEPS`` steps to measure C, the step time and the upload time, unless an
earlier attempt measured them; every commit updates the measurements and the interval.

MTBF of the job (``burst.plan.reliability``, the planner's formula), first that is known:
spec ``compute.mtbf_hours`` (spot; scaled to the pre-emptible nodes under an on-demand floor);
the running candidate's (``mtbf_hours``, the train step's ``--input plan=``); the catalog (spot:
the provider's ``spot_node_mtbf_hours``; on demand: ``on_demand_node_mtbf_hours``) divided by
the pre-emptible nodes; else ``ASSUMED_MTBF_HOURS`` a node (the catalog's shortest, spot).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field
from typing import Any

from burst.documents import PlanDocument, ProvisionDocument
from burst.documents.plan import Candidate
from burst.errors import BurstError
from burst.plan.interval import choose_interval, young_daly
from burst.plan.reliability import job_mtbf, node_mtbf_hours, preemption_kind
from burst.spec import BurstJob, node_count

log = logging.getLogger(__name__)

PROBE_STEPS = 3
ASSUMED_MTBF_HOURS = 8.0
EWMA = 0.3
MAX_HISTORY = 20  # interval changes kept for the document


def running_candidate(
    plan: PlanDocument | None, infra: ProvisionDocument | None = None
) -> Candidate | None:
    """The candidate this run rents: the one provision got (after a failover or a requeue it
    is not the plan's first), else the plan's first. Pricing and the checkpoint interval
    both size themselves to it."""
    if infra is not None and infra.candidate is not None:
        return infra.candidate
    if plan is not None and plan.candidates:
        return plan.candidates[0]
    return None


def resolve_mtbf(
    job: BurstJob, plan: PlanDocument | None, infra: ProvisionDocument | None = None
) -> tuple[float, str]:
    """Expected seconds between preemptions of the whole job, and where the figure comes from:
    ``burst.plan.reliability.job_mtbf``, the planner's own formula (the spec's job MTBF,
    else the plan candidate's, else the catalog's node MTBF over the pre-emptible nodes)."""
    cand = running_candidate(plan, infra)
    provider = str((cand.provider if cand is not None else None) or job.compute.providers[0])
    capacity = str((cand.capacity if cand is not None else None) or job.compute.capacity)
    nodes = node_count(job, {"nodes": cand.nodes} if cand is not None else None)
    floor = cand.floor_nodes if cand is not None and capacity == "spot_with_floor" else None
    floor_nodes = floor or 0
    if preemption_kind(capacity) == "spot" and job.compute.mtbf_hours is not None:
        m = job_mtbf(job, capacity, nodes, floor_nodes)
        return m.seconds, m.source
    if cand is not None and cand.mtbf_hours is not None and cand.mtbf_hours > 0:
        return cand.mtbf_hours * 3600, (
            f"plan candidate {cand.provider}/{cand.region} ({cand.mtbf_source or 'mtbf_hours'})"
        )
    found = _catalog_node_mtbf_hours(provider, capacity)
    if found is None:
        found = (
            ASSUMED_MTBF_HOURS,
            f"assumed {ASSUMED_MTBF_HOURS:g} h a node (no catalog figure for {provider} "
            f"{capacity})",
        )
    m = job_mtbf(job, capacity, nodes, floor_nodes, found)
    return m.seconds, m.source


def _catalog_node_mtbf_hours(provider: str, capacity: str) -> tuple[float, str] | None:
    from burst.plan.catalog import load_catalog

    try:
        cat = load_catalog()
    except BurstError as exc:  # a broken catalog file: fall back to the assumption, loudly
        log.warning("no MTBF from the catalog: %s", exc.one_line())
        return None
    try:
        return node_mtbf_hours(cat, None, provider, capacity)
    except BurstError:
        return None


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else (1 - EWMA) * old + EWMA * new


@dataclass
class CheckpointSchedule:
    explicit_steps: int | None
    mtbf_s: float
    mtbf_source: str
    planned_interval_s: float | None = None
    step_s: float | None = None
    blocking_s: float | None = None
    upload_s: float | None = None
    interval_steps: int | None = None
    last_save_step: int = 0
    why: str = ""
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def for_job(
        cls,
        job: BurstJob,
        plan: PlanDocument | None,
        measured: dict[str, float] | None = None,
        infra: ProvisionDocument | None = None,
    ) -> CheckpointSchedule:
        """The schedule for the candidate the run is in (``infra``'s, else the plan's first)."""
        policy = job.training.checkpoint.interval_steps
        mtbf_s, source = resolve_mtbf(job, plan, infra)
        cand = running_candidate(plan, infra)
        s = cls(
            policy if isinstance(policy, int) else None,
            mtbf_s,
            source,
            cand.checkpoint_interval_s if cand is not None else None,
        )
        m = measured or {}
        s.step_s, s.blocking_s, s.upload_s = m.get("step_s"), m.get("blocking_s"), m.get("upload_s")
        s._recompute()
        return s

    def start_at(self, step: int) -> None:
        self.last_save_step = step

    def record_step(self, seconds: float) -> None:
        first = self.step_s is None
        self.step_s = _ewma(self.step_s, seconds)
        if first:
            self._recompute()

    def saved_at(self, step: int) -> None:
        """A checkpoint of ``step`` was handed to the writer: the next one is due from here."""
        self.last_save_step = step

    def record_save(self, blocking_s: float, upload_s: float) -> None:
        """The measured costs of a commit."""
        self.blocking_s = _ewma(self.blocking_s, blocking_s)
        self.upload_s = _ewma(self.upload_s, upload_s)
        self._recompute()

    def _recompute(self) -> None:
        if self.explicit_steps is not None:
            self.interval_steps = self.explicit_steps
            self.why = f"spec training.checkpoint.interval_steps = {self.explicit_steps}"
            if self.upload_s and self.step_s and self.explicit_steps * self.step_s < self.upload_s:
                self.why += (
                    f" (shorter than the measured upload time {self.upload_s:.3f}s: saves queue up)"
                )
            return
        if self.blocking_s is None or self.step_s is None or self.upload_s is None:
            self.interval_steps = PROBE_STEPS
            self.why = (
                f"auto: first checkpoint after {PROBE_STEPS} steps to measure the checkpoint cost"
            )
            return
        choice = choose_interval(self.blocking_s, self.mtbf_s, self.upload_s, self.step_s)
        interval_s = choice.interval_s
        steps = max(1, math.ceil(interval_s / max(self.step_s, 1e-9)))
        self.interval_steps = steps
        self.why = (
            f"auto: {choice.reason} (blocking cost C measured, MTBF from {self.mtbf_source}; "
            f"upload {self.upload_s:.3g} s) = {steps} steps of {self.step_s:.3g} s"
        )
        entry = {
            "after_step": self.last_save_step,
            "interval_steps": steps,
            "interval_s": round(interval_s, 3),
        }
        if not self.history or self.history[-1]["interval_steps"] != steps:
            self.history = [*self.history, entry][-MAX_HISTORY:]

    def due(self, done: int) -> bool:
        assert self.interval_steps is not None
        if self.explicit_steps is not None:
            return done % self.explicit_steps == 0
        return done - self.last_save_step >= self.interval_steps

    def describe(self) -> dict[str, Any]:
        def r(v: float | None) -> float | None:
            return None if v is None else round(v, 6)

        yd = young_daly(self.blocking_s, self.mtbf_s) if self.blocking_s is not None else None
        return {
            "mode": "spec" if self.explicit_steps is not None else "young_daly",
            "interval_steps": self.interval_steps,
            "interval_s": r(self.interval_steps * self.step_s)
            if self.interval_steps and self.step_s
            else None,
            "young_daly_interval_s": r(yd),
            "planned_interval_s": self.planned_interval_s,
            "blocking_s": r(self.blocking_s),
            "upload_s": r(self.upload_s),
            "step_s": r(self.step_s),
            "mtbf_s": round(self.mtbf_s, 1),
            "mtbf_source": self.mtbf_source,
            "why": self.why,
            "changes": self.history,
        }

    def measured(self) -> dict[str, float]:
        out = {"step_s": self.step_s, "blocking_s": self.blocking_s, "upload_s": self.upload_s}
        return {k: v for k, v in out.items() if v is not None}
