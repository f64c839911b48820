"""Issue 44 (found by benchmarks/notice_window.py): the emergency choice counted a save still in
flight at the notice as the last commit's upload time, which is 0 until the attempt has
measured a commit of its own. A requeued attempt starts with its earlier attempts' throughput
but no commit, so a notice during its first routine save chose as if nothing were in flight,
and the emergency save queued behind that save took twice its estimate (the whole of the x2
margin). ``pending_s`` estimates the save in flight from its tier and the measured throughput.
"""

from __future__ import annotations

import pytest

from burst.preempt.emergency import SaveMeter, choose_emergency_save, pending_s

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
    # 6 s left: weights-only alone (1.1 s, x2 = 2.2 s) fits the 5 s budget; queued behind a
    # weights-only save in flight (2.2 s, x2 = 4.4 s) it still does; behind a full one
    # (3.1 + 1.1 s, x2 = 8.4 s) it does not, and the last committed checkpoint stands
    alone = choose_emergency_save(6.0, meter.costs(FULL, WEIGHTS))
    assert alone.tier == "weights"
    behind_weights = meter.costs(FULL, WEIGHTS, pending_s(meter, FULL, WEIGHTS, 3, None))
    assert choose_emergency_save(6.0, behind_weights).tier == "weights"
    behind_full = meter.costs(FULL, WEIGHTS, pending_s(meter, FULL, WEIGHTS, 6, 6))
    choice = choose_emergency_save(6.0, behind_full)
    assert choice.tier == "none", choice
    assert choice.estimate_weights_s == pytest.approx(3.1 + 1.1)
