"""Budget-aware admission: reserve a run's planned cost before anything is rented, settle it
to what was used at the end.

The provision step calls ``admit`` before it applies anything (a hook of the one
provision path, not a second executor); teardown calls ``settle``, and so do ``burst down``
and ``burst reap`` for a run whose runner died before its teardown (every ending settles).
The decision (admit, queue, admit with what is left, refuse) is
``burst.admission.policy.decide``, which the queue simulator calls too.

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

import datetime as dt
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from burst.admission.ledger import Entry, Ledger, Standing
from burst.admission.policy import Verdict, decide, reserve_usd, verdict, worst
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
        egress, storage = float(cand.egress_usd or 0.0), float(cand.storage_usd or 0.0)
        total, compute = reserve_usd(cand.price_per_hour, hours, job.budget.max_usd, egress,
                                     storage)  # fmt: skip
        gpus = rented_gpus(job, cand)
        r = Reservation(total, gpu_hours(gpus, hours), compute, egress, storage, gpus, hours)
        if best is None or (r.usd, r.gpu_hours) > (best.usd, best.gpu_hours):
            best = r
    if best is None:  # no candidate priced: the budget itself is the most it may spend
        gpus = rented_gpus(job, None)
        best = Reservation(job.budget.max_usd, gpu_hours(gpus, hours), job.budget.max_usd, 0.0,
                           0.0, gpus, hours)  # fmt: skip
    return best


def usd(x: float | None) -> str:
    return "unlimited" if x is None else f"${x:,.2f}"


REFUSED = ": refused before anything was rented"


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
        f"${r.usd:,.2f} ({r.gpu_hours:,.1f} GPU-hours){REFUSED}"
    )


#: How often a queued run looks at its team's ledger again (seconds).
QUEUE_POLL_S = 1.0


def admit(
    ledger: Ledger,
    job: BurstJob,
    run_id: str,
    candidates: Sequence[Candidate],
    *,
    now: float | None = None,
    wait_s: float = 0.0,
    poll_s: float = QUEUE_POLL_S,
) -> Entry:
    """Reserve the run's planned cost against its team's budget, before anything is rented.

    * It fits: admitted (the reservation is written under the team's lock).
    * It would fit once the team's other open reservations settle: it is **queued** (an
      entry in state ``queued``: it reserves nothing and rents nothing) and looks again
      every ``poll_s`` seconds for up to ``wait_s`` seconds (the provision step passes the
      run's deadline); still short then: refused.
    * It does not fit whole even then: admitted with what its team has left when that is a
      useful part of it (``policy.grant``: the entry's ``compute_usd`` is what the train
      step's budget guard stops it at), else queued while other reservations are open, else
      refused.

    A refusal raises BudgetRefused (exit 3; one line: team, window, remaining budget, the
    reservation). A run already admitted (a requeue) keeps its reservation."""
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
    queued_at: float | None = None

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
    give_up = time.monotonic() + max(0.0, wait_s)
    while True:
        with ledger.locked(team):
            at = time.time() if now is None else now
            others = [e for e in ledger.entries(team) if e.run_id != run_id]
            done = [e for e in others if e.state != "admitted"]
            late = queued_at is not None and time.monotonic() >= give_up
            decided, amount, line = _decide(
                team,
                run_id,
                r,
                ledger.standing(team, at, others),
                ledger.standing(team, at, done),
                late,
            )
            if decided == "admit":
                admitted = entry("admitted", at)
                if amount < r.usd - 1e-9:  # what the team has left: the guard stops it there
                    extra = r.egress_usd + r.storage_usd
                    admitted = admitted.model_copy(
                        update={
                            "reserved_usd": amount,
                            "compute_usd": max(0.0, amount - extra),
                            "refusal": line.replace(REFUSED, "")
                            + f": admitted with the ${amount:,.2f} left, where its budget guard "
                            "stops it",
                        }
                    )
                    log.warning("%s", admitted.refusal)
                ledger.write(admitted)
                break
            # past the deadline, once the decision was made as a late one (what the team has
            # left): a slow first pass must not refuse a run that decision would admit; a run
            # that may not wait at all (wait_s 0) is refused at once, as ever
            expired = time.monotonic() >= give_up
            if decided == "refuse" or (expired and (late or wait_s <= 0)):
                if queued_at is not None:
                    line += f" (queued {time.time() - queued_at:,.0f} s until its deadline)"
                ledger.write(entry("refused", at, line))
                raise BudgetRefused(line)
            if queued_at is None:
                queued_at = time.time()
                ledger.write(entry("queued", at))
                log.info("run %s is queued: team %s's open reservations hold its budget; it "
                         "rents nothing while it waits (up to %.0f s)", run_id, team,
                         wait_s)  # fmt: skip
        time.sleep(min(poll_s, max(0.0, give_up - time.monotonic())))
    log.info("run %s reserved $%.2f (%.1f GPU-hours) of team %s's budget", run_id, r.usd,
             r.gpu_hours, team)  # fmt: skip
    return admitted


def _decide(
    team: str,
    run_id: str,
    r: Reservation,
    standing: Sequence[Standing],
    settled: Sequence[Standing],
    at_deadline: bool,
) -> tuple[Verdict, float, str]:
    """The policy (``burst.admission.policy.decide``) over every window: (verdict, dollars
    granted, the refusal line of the first window that does not admit the whole run).
    Dollars may be granted in part (the budget guard stops the run there); GPU-hours only
    whole (``policy.verdict``)."""
    out: list[Verdict] = []
    amount = r.usd
    line = ""
    for s, done in zip(standing, settled, strict=True):
        base, held = done.used_usd, s.used_usd - done.used_usd
        v_usd, got = decide(s.limit.usd, base, held, r.usd, at_deadline=at_deadline)
        gh_base, gh_held = done.used_gpu_hours, s.used_gpu_hours - done.used_gpu_hours
        v_gh = verdict(s.limit.gpu_hours, gh_base, gh_held, r.gpu_hours)
        if at_deadline and v_gh == "queue":
            v_gh = "refuse"
        if not line and (v_usd != "admit" or got < r.usd - 1e-9):
            line = refusal_line(team, run_id, s, r, "usd")
        if not line and v_gh != "admit":
            line = refusal_line(team, run_id, s, r, "gpu_hours")
        out += [v_usd, v_gh]
        if v_usd == "admit":
            amount = min(amount, got)
    return worst(out), amount, line


def _epoch(text: str | None) -> float | None:
    if not text:
        return None
    try:
        t = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def _used_span(attempts: Sequence[TrainAttempt], end: float) -> tuple[float | None, float]:
    """When the attempts' usage began and ended (epoch seconds): the first start, the last
    finish (a killed attempt that never finished: ``end``, when the run was settled)."""
    starts = [t for t in (_epoch(a.started_at) for a in attempts) if t is not None]
    ends = [_epoch(a.finished_at) for a in attempts]
    last = end if any(t is None for t in ends) else max((t for t in ends if t), default=end)
    return (min(starts) if starts else None), last


def settle(
    ledger: Ledger,
    team: str,
    run_id: str,
    attempts: Sequence[TrainAttempt] | None,
    *,
    now: float | None = None,
    ending: str | None = None,
) -> Entry | None:
    """Charge the run what it used and close its reservation, whatever its ending
    (``ending``: burst.endings' word, recorded). ``attempts`` None: the records could not be
    read, so the reservation is charged in full. The usage is dated from the attempts' start
    and finish, so a window counts the hours that fall in it. A queued entry (it never held
    a reservation) is closed with nothing charged. Returns None when the run has no open
    entry (refused, or settled already)."""
    held = ledger.entry(team, run_id)
    if held is None or held.state not in ("admitted", "queued"):
        return None
    at = time.time() if now is None else now
    used_from: float | None = None
    used_to: float | None = at
    if held.state == "queued":
        attempts = []
    if attempts is None:
        actual_usd, actual_gh = held.reserved_usd, held.reserved_gpu_hours
        basis = "the reservation (the attempt records could not be read)"
        used_from = held.at
    else:
        used_from, used_to = _used_span(attempts, at)
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
            "settled_at": at,
            "basis": basis,
            "ending": ending,
            "used_from": used_from,
            "used_to": used_to,
        }
    )
    ledger.write(settled)
    return settled
