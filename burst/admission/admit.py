"""Budget-aware admission: reserve a run's planned cost before anything is rented, settle it
to what was used at the end.

The provision step calls ``admit`` before it applies anything (a hook of the one
provision path, not a second executor); teardown, which always runs, calls ``settle``.

* The reservation is the most any allowed candidate can cost: compute at the candidate's
  price for the budget's hours (capped at ``budget.max_usd``, where the budget guard stops a
  run), plus its planned egress and storage; GPU-hours are the GPUs it rents (every GPU of
  its nodes) x ``budget.max_hours`` (``burst.budget.gpu_hours``, the one basis).
* A run that is requeued (provision runs again for it) keeps its reservation: it is not
  checked or charged again.
* Settlement charges what the train attempts' records say was used (a preempted run: only
  the hours it ran), plus the planned egress and storage when it trained at all; GPU-hours
  are ``burst.budget.billed_gpu_hours`` of the same records, the figure the report shows.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from burst.admission.ledger import Entry, Ledger, Standing
from burst.budget import billed_gpu_hours, gpu_hours, rented_gpus
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.errors import PolicyRefusal
from burst.spec import BurstJob

log = logging.getLogger(__name__)


class BudgetRefused(PolicyRefusal):
    """The team's remaining budget does not cover the run's reservation (exit 3)."""


@dataclass(frozen=True)
class Reservation:
    usd: float
    gpu_hours: float
    compute_usd: float
    egress_usd: float
    storage_usd: float
    gpus: int
    hours: float


def reservation(job: BurstJob, candidates: Sequence[Candidate]) -> Reservation:
    """The most any of ``candidates`` can cost this run (the plan's ranked, allowed ones)."""
    hours = float(job.budget.max_hours)
    best: Reservation | None = None
    for cand in candidates or []:
        rate = cand.price_per_hour
        compute = job.budget.max_usd if rate is None else min(job.budget.max_usd, rate * hours)
        egress, storage = float(cand.egress_usd or 0.0), float(cand.storage_usd or 0.0)
        gpus = rented_gpus(job, cand)
        r = Reservation(compute + egress + storage, gpu_hours(gpus, hours), compute, egress,
                        storage, gpus, hours)  # fmt: skip
        if best is None or (r.usd, r.gpu_hours) > (best.usd, best.gpu_hours):
            best = r
    if best is None:  # no candidate priced: the budget itself is the most it may spend
        gpus = rented_gpus(job, None)
        best = Reservation(job.budget.max_usd, gpu_hours(gpus, hours), job.budget.max_usd, 0.0,
                           0.0, gpus, hours)  # fmt: skip
    return best


def usd(x: float | None) -> str:
    return "unlimited" if x is None else f"${x:,.2f}"


def refusal_line(team: str, run_id: str, s: Standing, r: Reservation, what: str) -> str:
    override = ""
    if s.override is not None:
        why = f" '{s.override.reason}'" if s.override.reason else ""
        override = f" (override{why} until {s.override.end})"
    if what == "usd":
        left = f"{usd(s.remaining_usd)} of {usd(s.limit.usd)} left"
    else:
        left = f"{s.remaining_gpu_hours:,.1f} of {s.limit.gpu_hours:,.1f} GPU-hours left"
    return (
        f"team {team}: {s.window} budget has {left}{override}; run {run_id} reserves "
        f"${r.usd:,.2f} ({r.gpu_hours:,.1f} GPU-hours): refused before anything was rented"
    )


def _short(s: Standing, r: Reservation) -> str | None:
    eps = 1e-9
    if s.remaining_usd is not None and r.usd > s.remaining_usd + eps:
        return "usd"
    if s.remaining_gpu_hours is not None and r.gpu_hours > s.remaining_gpu_hours + eps:
        return "gpu_hours"
    return None


def admit(
    ledger: Ledger,
    job: BurstJob,
    run_id: str,
    candidates: Sequence[Candidate],
    *,
    now: float | None = None,
) -> Entry:
    """Reserve the run's planned cost against its team's budget, or raise BudgetRefused
    (one line: team, window, remaining budget, the reservation). A run already admitted
    (a requeue) keeps its reservation."""
    team = job.team
    held = ledger.entry(team, run_id)
    if held is not None and held.state == "admitted":
        kept = held.model_copy(update={"requeues": held.requeues + 1})
        ledger.write(kept)
        log.info("run %s keeps its reservation of $%.2f (requeue %d)", run_id, kept.reserved_usd,
                 kept.requeues)  # fmt: skip
        return kept
    r = reservation(job, candidates)
    budget = ledger.teams().budget(team)

    def entry(state: str, at: float, refusal: str | None = None) -> Entry:
        return Entry.model_validate(
            {
                "run_id": run_id, "team": team, "priority": str(job.priority), "state": state,
                "at": at, "gpus": r.gpus, "budget_hours": r.hours, "reserved_usd": r.usd,
                "reserved_gpu_hours": r.gpu_hours, "compute_usd": r.compute_usd,
                "egress_usd": r.egress_usd, "storage_usd": r.storage_usd, "refusal": refusal,
            }
        )  # fmt: skip

    if budget is None:  # no limit: recorded, never refused, no lock needed
        admitted = entry("admitted", time.time() if now is None else now)
        ledger.write(admitted)
        return admitted
    with ledger.locked(team):
        at = time.time() if now is None else now
        others = [e for e in ledger.entries(team) if e.run_id != run_id]
        standing = ledger.standing(team, at, others)
        for s in standing:
            what = _short(s, r)
            if what is not None:
                line = refusal_line(team, run_id, s, r, what)
                ledger.write(entry("refused", at, line))
                raise BudgetRefused(line)
        admitted = entry("admitted", at)
        ledger.write(admitted)
    log.info("run %s reserved $%.2f (%.1f GPU-hours) of team %s's budget", run_id, r.usd,
             r.gpu_hours, team)  # fmt: skip
    return admitted


def settle(
    ledger: Ledger,
    team: str,
    run_id: str,
    attempts: Sequence[TrainAttempt] | None,
    *,
    now: float | None = None,
) -> Entry | None:
    """Charge the run what it used and close its reservation. ``attempts`` None: the
    records could not be read, so the reservation is charged in full. Returns None when the
    run has no open reservation (refused, or settled already)."""
    held = ledger.entry(team, run_id)
    if held is None or held.state != "admitted":
        return None
    if attempts is None:
        actual_usd, actual_gh = held.reserved_usd, held.reserved_gpu_hours
        basis = "the reservation (the attempt records could not be read)"
    else:
        compute = sum(float(a.cost_usd or 0.0) for a in attempts)
        hours = sum(float(a.hours or 0.0) for a in attempts)
        trained = hours > 0 or compute > 0
        extra = held.egress_usd + held.storage_usd if trained else 0.0
        actual_usd, actual_gh = compute + extra, billed_gpu_hours(attempts, held.gpus)
        preempted = sum(1 for a in attempts if a.preempted)
        basis = f"{len(attempts)} train attempt(s), {preempted} preempted: compute used" + (
            " + planned egress and storage" if trained else ""
        )
    settled = held.model_copy(
        update={
            "state": "settled",
            "actual_usd": round(actual_usd, 6),
            "actual_gpu_hours": round(actual_gh, 6),
            "settled_at": time.time() if now is None else now,
            "basis": basis,
        }
    )
    ledger.write(settled)
    return settled
