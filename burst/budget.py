"""The budget guard, and the one GPU-hour basis every figure of a run counts with.

The budget guard: a run past its budget's hours or dollars is stopped (then torn down). The
running cost is the rate of what the run rents (the plan's price per hour, for the candidate
it got) times the hours since the run started renting, plus what earlier attempts already
spent. ``BURST_BUDGET_TIME_SCALE`` multiplies elapsed time (a demo and test knob: 3600 makes
each second count as an hour); it is 1 unless set.

GPU-hours (docs/queue.md "GPU-hours"): **billed GPU-hours = GPUs rented x hours paid**.
GPUs rented are every GPU of every node the run rents (a partial node's idle GPUs included:
the provider bills them, ``burst.plan.billing``); the hours paid are the hours the money is
charged for. The plan's ``paid_gpu_hours`` (expected paid hours), the ledger's reservation
(``budget.max_hours``) and settlement (the hours the train attempts' guards metered, the same
hours their ``cost_usd`` is for), the report's GPU-hours and the team budgets' ``gpu_hours``
all count with :func:`gpu_hours`; a run's figure is :func:`billed_gpu_hours`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from burst.errors import PolicyRefusal


class _Sized(Protocol):
    @property
    def gpus(self) -> int | None: ...


class _SpecCompute(Protocol):
    @property
    def gpu_count(self) -> int: ...


class _Job(Protocol):
    @property
    def compute(self) -> _SpecCompute: ...


class _Metered(Protocol):
    @property
    def hours(self) -> float | None: ...

    @property
    def gpus(self) -> int | None: ...


def gpu_hours(gpus: int, hours: float) -> float:
    """THE GPU-hour basis: ``gpus`` rented (used or idle) for ``hours`` paid."""
    return gpus * hours


def rented_gpus(job: _Job, candidate: _Sized | None) -> int:
    """The GPUs a run rents and is billed for: its candidate's (every GPU of every node,
    ``burst.plan.billing``), else the spec's ``compute.gpu_count``."""
    gpus = candidate.gpus if candidate is not None else None
    return int(gpus) if gpus else int(job.compute.gpu_count)


def metered_hours(attempts: Iterable[_Metered]) -> float:
    """The hours the train attempts' budget guards metered (what their cost_usd is for)."""
    return sum(float(a.hours or 0.0) for a in attempts)


def billed_gpu_hours(attempts: Iterable[_Metered], gpus: int) -> float:
    """A run's billed GPU-hours: each attempt's metered hours x the GPUs it rented (its
    record's ``gpus``; ``gpus`` for a record written without them)."""
    return sum(gpu_hours(int(a.gpus or gpus), float(a.hours or 0.0)) for a in attempts)


def _span(hours: float) -> str:
    return f"{hours * 3600:.3g} s" if hours < 1 else f"{hours:,.3g} h"


def run_gpu_hours(
    attempts: Sequence[_Metered], gpus: int | None, settled: float | None, step_seconds: float
) -> tuple[float | None, str | None]:
    """A finished or running run's billed GPU-hours and the words that say how they were
    counted: from the train attempts' metered hours (the ledger settles with the same
    function, so the two figures agree), else the ledger's settled figure, else an estimate
    from the train step's wall time (no attempt recorded its hours)."""
    if gpus is None:
        return None, None
    timed = [a for a in attempts if a.hours is not None]
    if timed:
        rented = sorted({int(a.gpus or gpus) for a in timed})
        return billed_gpu_hours(timed, gpus), (
            f"billed: {' then '.join(map(str, rented))} GPU(s) rented x "
            f"{_span(metered_hours(timed))} metered by {len(timed)} train attempt(s), "
            "the ledger's basis"
        )
    if settled is not None:
        return settled, "billed: as the team ledger settled the run"
    if step_seconds <= 0:  # train never ran: nothing was metered, and nothing to estimate
        return 0.0, "none: train did not run"
    hours = step_seconds / 3600.0
    return gpu_hours(gpus, hours), (
        f"estimate: {gpus} GPU(s) rented x the train step's {_span(hours)} (no metered hours "
        "recorded)"
    )


def time_scale() -> float:
    from burst import faults

    return faults.budget_time_scale()


class BudgetExceeded(PolicyRefusal):
    """The run went past its budget; the train step stops and teardown follows."""


@dataclass
class BudgetGuard:
    max_usd: float
    max_hours: float
    usd_per_hour: float
    spent_usd: float = 0.0  # by earlier attempts of the same run
    spent_hours: float = 0.0
    started: float = 0.0  # time.monotonic() when renting started (this attempt)
    scale: float = 1.0

    @classmethod
    def start(
        cls,
        max_usd: float,
        max_hours: float,
        usd_per_hour: float,
        *,
        spent_usd: float = 0.0,
        spent_hours: float = 0.0,
    ) -> BudgetGuard:
        return cls(
            max_usd, max_hours, usd_per_hour, spent_usd, spent_hours, time.monotonic(), time_scale()
        )

    def hours(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return self.spent_hours + (now - self.started) * self.scale / 3600.0

    def cost_usd(self, now: float | None = None) -> float:
        now = time.monotonic() if now is None else now
        return self.spent_usd + (now - self.started) * self.scale / 3600.0 * self.usd_per_hour

    def check(self, now: float | None = None) -> None:
        """Raise BudgetExceeded (exit 3) once the hours or the dollars are spent."""
        hours, cost = self.hours(now), self.cost_usd(now)
        if hours > self.max_hours:
            raise BudgetExceeded(
                f"budget exceeded: {hours:.2f} h used of max_hours "
                f"{self.max_hours:g} (cost so far ${cost:,.2f})"
            )
        if cost > self.max_usd:
            raise BudgetExceeded(
                f"budget exceeded: ${cost:,.2f} spent of max_usd "
                f"${self.max_usd:,.2f} after {hours:.2f} h at "
                f"${self.usd_per_hour:,.2f}/h"
            )
