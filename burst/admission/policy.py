"""The admission policy, one copy: what the ledger (``burst.admission.admit``) decides at
runtime and what the queue simulator (``burst.admission.simulate``) replays.

* :func:`reserve_usd`: a run's reservation for one candidate: its rate for the budget's hours,
  capped at ``budget.max_usd`` (where the budget guard stops it), plus planned egress and
  storage.
* :func:`verdict`: admit, queue or refuse a reservation against one window's limit, given
  what settled runs used in the window and what open reservations hold. A run that fits
  once the open reservations settle is queued (it reserves and rents nothing while it
  waits); one that does not fit even then is refused whole.
* :func:`grant`: a run refused whole, or still queued at its deadline, is admitted with what
  its team has left when that is a useful part of its reservation; its budget guard stops
  it there (budget-stopped, its work checkpointed). So a team whose demand passes its limit
  spends close to the limit, never past it.
* :func:`victims`: which running workloads a waiting one preempts. On a cluster Kueue
  chooses (``preemption.withinClusterQueue: LowerPriority``): strictly lower priority only,
  the lowest priority first, then the most recently admitted (Kueue's candidate ordering,
  pkg/scheduler/preemption); burst adds no rule of its own, so the simulator models exactly
  that, and burst's part is what a victim does (save on the notice, exit 75, release its
  rental, requeue).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Literal, TypeVar

EPS = 1e-9

Verdict = Literal["admit", "queue", "refuse"]


def reserve_usd(
    price_per_hour: float | None,
    hours: float,
    max_usd: float,
    egress_usd: float = 0.0,
    storage_usd: float = 0.0,
) -> tuple[float, float]:
    """(reservation, compute part) of one candidate: ``price_per_hour`` x ``hours`` capped at
    ``max_usd`` (the whole budget when the candidate is unpriced), plus egress and storage."""
    compute = max_usd if price_per_hour is None else min(max_usd, price_per_hour * hours)
    return compute + egress_usd + storage_usd, compute


def verdict(limit: float | None, settled: float, reserved: float, need: float) -> Verdict:
    """One window, one unit (dollars or GPU-hours): ``settled`` is what settled runs used in
    the window, ``reserved`` what the other open reservations hold, ``need`` the run's
    reservation."""
    if limit is None or need <= limit - settled - reserved + EPS:
        return "admit"
    if reserved > EPS and need <= limit - settled + EPS:
        return "queue"
    return "refuse"


#: A run that does not fit whole is admitted with what its team has left (the budget guard
#: stops it there, its work checkpointed) when that is at least this share of its
#: reservation; less is refused (a run stopped almost at once would waste its provisioning).
GRANT_FLOOR = 0.1


def grant(limit: float | None, settled: float, reserved: float, need: float) -> float | None:
    """What a run that is refused whole (or still queued at its deadline) may be admitted
    with instead: its team's budget left in the window, when that is at least
    :data:`GRANT_FLOOR` of ``need``; None: refused."""
    if limit is None:
        return need
    left = limit - settled - reserved
    return left if left >= GRANT_FLOOR * need - EPS and left > EPS else None


def decide(
    limit: float | None,
    settled: float,
    reserved: float,
    need: float,
    *,
    at_deadline: bool = False,
) -> tuple[Verdict, float]:
    """The whole policy for one window (dollars): (verdict, amount admitted).

    1. It fits whole: admitted with ``need``.
    2. It fits whole once the other open reservations settle, and its deadline has not come
       (``at_deadline``: a queued run out of time): queued.
    3. What is left is a useful part of ``need`` (:func:`grant`): admitted with that (capped).
       A run still queued at its deadline gets this too: it would fit in part, so refusing
       it would leave budget unused that the team was allowed to spend.
    4. Open reservations may still free more, and its deadline has not come: queued.
    5. Refused.
    """
    v = verdict(limit, settled, reserved, need)
    if v == "admit":
        return "admit", need
    if v == "queue" and not at_deadline:
        return "queue", 0.0
    left = grant(limit, settled, reserved, need)
    if left is not None:
        return "admit", min(need, left)
    if reserved > EPS and not at_deadline:
        return "queue", 0.0
    return "refuse", 0.0


def worst(verdicts: Iterable[Verdict]) -> Verdict:
    """Refuse if any window refuses, else queue if any queues, else admit."""
    seen = set(verdicts)
    return "refuse" if "refuse" in seen else "queue" if "queue" in seen else "admit"


W = TypeVar("W")


def victims(
    running: Sequence[W],
    need: int,
    free: int,
    *,
    priority: Callable[[W], int],
    admitted_at: Callable[[W], float],
    gpus: Callable[[W], int],
    of: int,
) -> list[W] | None:
    """Kueue's choice: of ``running`` (one flavor's workloads), those of priority below
    ``of``, lowest priority first, then the most recently admitted, taken until ``need``
    GPUs are free; None when even all of them would not free enough."""
    cands = sorted(
        (w for w in running if priority(w) < of), key=lambda w: (priority(w), -admitted_at(w))
    )
    chosen: list[W] = []
    for w in cands:
        if free >= need:
            break
        chosen.append(w)
        free += gpus(w)
    return chosen if free >= need and chosen else None
