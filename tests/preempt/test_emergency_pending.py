"""The emergency choice's rule (``burst.preempt.emergency``), pure functions, worked examples.

Issue 44 (found by benchmarks/notice_window.py): the emergency choice counted a save still in
flight at the notice as the last commit's upload time, which is 0 until the attempt has
measured a commit of its own. A requeued attempt starts with its earlier attempts' throughput
but no commit, so a notice during its first routine save chose as if nothing were in flight,
and the emergency save queued behind that save took twice its estimate (the whole of the x2
margin). ``pending_s`` estimates the save in flight from its tier and the measured throughput.

Issue 44 (the p99 from notice to commit at most half the window): the rule admitted a save
predicted to commit at (window - reserve) / 2 with nothing spent since the notice, so the
detect time or an estimate off by more than 1.0x put the worst admitted save past half the
window (scaled 0.53x). An admitted save must now be predicted to commit by half the window
from the notice, the time spent since the notice counted, and the estimate multiplied by its
error measured on this run's earlier saves (SAFETY until two are measured).
"""

from __future__ import annotations

import random

import pytest

from burst.preempt.emergency import (
    RESERVE_S,
    SAFETY,
    SaveCosts,
    SaveMeter,
    choose_emergency_save,
    pending_s,
)

FULL, WEIGHTS = 6_000_000, 2_000_000


def _requeued() -> SaveMeter:
    """The meter of an attempt that has committed nothing yet: what its predecessors measured
    (``TrainAttempt.save_meter``), 2 MB/s and 0.1 s a save."""
    meter = SaveMeter.from_dict({"bytes_per_s": 2e6, "fixed_s": 0.1, "blocking_s_per_byte": 0.0})
    assert meter.last_upload_s == 0.0  # what the choice used to count a save in flight as
    return meter


def test_a_save_in_flight_counts_as_the_whole_of_its_tier() -> None:
    meter = _requeued()
    assert pending_s(meter, FULL, WEIGHTS, None, None) == 0.0
    assert pending_s(meter, FULL, WEIGHTS, 3, None) == pytest.approx(0.1 + 1.0)  # weights
    assert pending_s(meter, FULL, WEIGHTS, 6, 6) == pytest.approx(0.1 + 3.0)  # the full one


def test_the_save_in_flight_can_turn_a_fitting_tier_into_none() -> None:
    meter = _requeued()
    # a 10-s notice: weights-only alone (1.1 s, x2 = 2.2 s) commits by half of it (5 s);
    # queued behind a weights-only save in flight (2.2 s, x2 = 4.4 s) it still does; behind
    # a full one (3.1 + 1.1 s, x2 = 8.4 s) it does not, and the last committed checkpoint stands
    alone = choose_emergency_save(10.0, meter.costs(FULL, WEIGHTS))
    assert alone.tier == "weights"
    behind_weights = meter.costs(FULL, WEIGHTS, pending_s(meter, FULL, WEIGHTS, 3, None))
    assert choose_emergency_save(10.0, behind_weights).tier == "weights"
    behind_full = meter.costs(FULL, WEIGHTS, pending_s(meter, FULL, WEIGHTS, 6, 6))
    choice = choose_emergency_save(10.0, behind_full)
    assert choice.tier == "none", choice
    assert choice.estimate_weights_s == pytest.approx(3.1 + 1.1)


def _measured(error: float | None) -> SaveCosts:
    """1 MB/s measured, full 24 MB, weights 12 MB; ``error``: the measured actual/estimate."""
    return SaveCosts(24_000_000, 12_000_000, 1e6, error=error, error_saves=2 if error else 0)


def test_time_spent_since_the_notice_counts_against_half_the_window() -> None:
    costs = _measured(1.0)
    fresh = choose_emergency_save(30.0, costs, window_s=30.0)  # 12 s fits 15 s
    assert fresh.tier == "weights" and fresh.budget_s == pytest.approx(15.0)
    # 4 s spent (a long step before the boundary): 12 s does not fit the 11 s left of the
    # half; the old rule (12 s x2 <= 26 s - 1 s) admitted it, to commit at 16 s > 15 s
    late = choose_emergency_save(26.0, costs, window_s=30.0)
    assert late.tier == "none" and late.elapsed_s == pytest.approx(4.0), late
    assert "4.00s spent since the notice" in late.reason


def test_the_margin_is_the_estimates_measured_error_else_safety() -> None:
    # 120 s window, half 60 s: full 24 s fits with a measured error up to 2.5
    assert choose_emergency_save(120.0, _measured(1.2)).tier == "full"
    c = choose_emergency_save(120.0, _measured(2.6))  # 62.4 s > 60 s: weights only
    assert (c.tier, c.margin, c.margin_source) == ("weights", 2.6, "measured")
    # 40 s window, half 20 s: weights 12 s fits a measured 1.2 (14.4 s), not SAFETY's 24 s
    assert choose_emergency_save(40.0, _measured(1.2)).tier == "weights"
    unmeasured = choose_emergency_save(40.0, _measured(None))
    assert (unmeasured.tier, unmeasured.margin) == ("none", SAFETY)
    assert unmeasured.margin_source == "safety" and "SAFETY" in unmeasured.reason


def test_the_meter_measures_its_own_error_out_of_sample() -> None:
    m = SaveMeter()
    m.record(1_000_000, 1_000_000, blocking_s=0.0, upload_s=1.0)  # nothing predicted it
    assert m.ratios == [] and m.error() is None
    m.record(1_000_000, 1_000_000, blocking_s=0.0, upload_s=1.5)  # predicted 1.0 s
    assert m.ratios == [pytest.approx(1.5)] and m.error() is None  # one is not enough
    m.record(1_000_000, 1_000_000, blocking_s=0.1, upload_s=0.9)  # predicted 1.5 s
    assert m.ratios[-1] == pytest.approx(1.0 / 1.5) and m.error() == pytest.approx(1.5)
    assert m.costs(3_000_000, 1_000_000).error == pytest.approx(1.5)
    # the next attempt (a requeue) starts with the errors measured, not SAFETY
    again = SaveMeter.from_dict(m.as_dict())
    assert again.error() == pytest.approx(1.5)
    assert again.costs(3_000_000, 1_000_000) == m.costs(3_000_000, 1_000_000)


def test_estimates_that_overshoot_never_shrink_the_margin_below_one() -> None:
    m = SaveMeter.from_dict({"bytes_per_s": 1e6, "error_ratios": [0.3, 0.5]})
    assert m.error() == 1.0


def test_an_admitted_save_is_predicted_to_commit_by_half_the_window() -> None:
    """The class, over seeded random notices: whatever is admitted, margin x its estimate
    ends by half the window from the notice and by the reserve before the deadline."""
    rng = random.Random(44)
    admitted = 0
    for _ in range(2000):
        window = rng.choice((30.0, 120.0, rng.uniform(2.0, 300.0)))
        left = window - rng.uniform(0.0, window * 0.6)
        error = rng.choice((None, rng.uniform(1.0, 3.0)))
        costs = SaveCosts(
            full_bytes=rng.randint(1, 10**9),
            weights_bytes=rng.randint(1, 10**8),
            bytes_per_s=rng.choice((None, rng.uniform(1e6, 1e9))),
            pending_s=rng.choice((0.0, rng.uniform(0.0, 30.0))),
            fixed_s=rng.uniform(0.0, 2.0),
            error=error,
        )
        c = choose_emergency_save(left, costs, window_s=window)
        if c.tier == "none":
            continue
        admitted += 1
        ends = (window - left) + c.margin * costs.estimate_s(c.tier)  # from the notice
        assert ends <= 0.5 * window + 1e-9 and ends <= window - RESERVE_S + 1e-9, c
        assert c.margin >= 1.0 and (error is not None or c.margin == SAFETY)
    assert admitted > 100
