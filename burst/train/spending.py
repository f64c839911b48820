"""What the run spends: the hourly rate of what it rents and the budget guard of an attempt
(``budget.max_usd`` / ``budget.max_hours``, counting what earlier attempts spent)."""

from __future__ import annotations

from burst.budget import BudgetExceeded, BudgetGuard
from burst.documents import PlanDocument, ProvisionDocument
from burst.documents.train import TrainAttempt
from burst.spec import BurstJob
from burst.train.schedule import running_candidate


def hourly_rate(infra: ProvisionDocument | None, plan: PlanDocument | None) -> float | None:
    """USD per hour of what the run rents: the candidate provision got, else the plan's first."""
    cand = running_candidate(plan, infra)
    return cand.price_per_hour if cand is not None else None


def open_budget(
    job: BurstJob,
    rate: float | None,
    past: list[TrainAttempt],
    infra: ProvisionDocument | None = None,
) -> BudgetGuard:
    """The guard of this attempt, started with what the earlier ``past`` attempts spent. A run
    its team's ledger admitted with less than its budget (``burst.admission.policy.grant``:
    what the team had left) stops at that: the admission's compute dollars."""
    max_usd = job.budget.max_usd
    granted = infra.admission if infra is not None else None
    if granted is not None and 0 < granted.compute_usd < max_usd:
        max_usd = granted.compute_usd
    return BudgetGuard.start(
        max_usd,
        job.budget.max_hours,
        rate or 0.0,
        spent_usd=sum(float(a.cost_usd or 0) for a in past),
        spent_hours=sum(float(a.hours or 0) for a in past),
    )


def over(budget: BudgetGuard) -> BudgetExceeded | None:
    """This rank's budget check."""
    try:
        budget.check()
    except BudgetExceeded as exc:
        return exc
    return None


def over_sure(budget: BudgetGuard, step: int) -> BudgetExceeded:
    """The ranks agreed the budget is exceeded: this rank's reason, or its peer's."""
    return over(budget) or BudgetExceeded(f"budget exceeded (found by another rank at step {step})")
