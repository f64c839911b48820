from __future__ import annotations

import pytest

from burst.budget import BudgetExceeded, BudgetGuard, time_scale
from burst.errors import EXIT_REFUSED, BadInputError


def test_dollars_run_out_first() -> None:
    g = BudgetGuard(max_usd=100, max_hours=24, usd_per_hour=50, started=0.0, scale=1.0)
    g.check(now=3600 * 1.9)  # $95: fine
    with pytest.raises(BudgetExceeded) as info:
        g.check(now=3600 * 2.1)  # $105
    assert "max_usd $100.00" in info.value.message
    assert info.value.exit_code == EXIT_REFUSED


def test_hours_run_out_first_and_earlier_attempts_count() -> None:
    g = BudgetGuard(
        max_usd=10_000,
        max_hours=2,
        usd_per_hour=1,
        spent_hours=1.5,
        spent_usd=1.5,
        started=0.0,
        scale=1.0,
    )
    g.check(now=3600 * 0.4)
    with pytest.raises(BudgetExceeded) as info:
        g.check(now=3600 * 0.6)
    assert "max_hours 2" in info.value.message
    assert g.cost_usd(now=3600 * 0.5) == pytest.approx(2.0)


def test_time_scale(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURST_BUDGET_TIME_SCALE", "3600")
    assert time_scale() == 3600
    g = BudgetGuard.start(100, 24, 60)
    assert g.scale == 3600
    monkeypatch.setenv("BURST_BUDGET_TIME_SCALE", "fast")
    with pytest.raises(BadInputError):
        time_scale()


def test_a_run_whose_train_never_ran_bills_no_gpu_hours() -> None:
    """It said "estimate: 8 GPU(s) rented x the train step's 0 s" (issue 46's money class)."""
    from burst.budget import run_gpu_hours

    hours, basis = run_gpu_hours([], 8, None, 0.0)
    assert hours == 0.0 and basis == "none: train did not run"
    hours, basis = run_gpu_hours([], 8, None, 1800.0)  # a train step without records
    assert hours == 4.0 and basis is not None and basis.startswith("estimate: 8 GPU(s)")
