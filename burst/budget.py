"""The budget guard: a run past its budget's hours or dollars is stopped (then torn down).

The running cost is the rate of what the run rents (the plan's price per hour, for the
candidate it got) times the hours since the run started renting, plus what earlier attempts
already spent. ``BURST_BUDGET_TIME_SCALE`` multiplies elapsed time (a demo and test knob: 3600
makes each second count as an hour); it is 1 unless set.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from burst.errors import PolicyRefusal


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
