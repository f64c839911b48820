"""Issue 31, adaptive rounds: a regional-sync run's round boundaries (burst.regional.rounds),
constant H as before, or short rounds first doubling up to H; the planner counts their bytes."""

from __future__ import annotations

import math

import pytest

from burst.plan.crossregion import SEED_002_LINKS, ModelProfile
from burst.regional.estimates import plan_regional
from burst.regional.rounds import Rounds
from burst.regional.runtime import rounds_for, steps_in_round


def test_constant_rounds_are_h_steps_and_the_last_takes_what_is_left() -> None:
    r = Rounds(23, 5)
    assert r.lengths() == [5, 5, 5, 5, 3] and r.count == 5 == math.ceil(23 / 5)
    assert [r.start(i) for i in range(6)] == [0, 5, 10, 15, 20, 23]
    assert r.locate(0) == (0, 0) and r.locate(7) == (1, 2) and r.locate(23) == (5, 0)
    assert [d for d in range(25) if r.ending_at(d) is not None] == [5, 10, 15, 20, 23]
    # the runtime's helpers are the same arithmetic
    assert rounds_for(23, 5) == 5 and steps_in_round(4, 23, 5) == 3


def test_adaptive_rounds_double_from_the_first_up_to_h() -> None:
    r = Rounds(100, 16, first_local_steps=2)
    assert r.lengths() == [2, 4, 8, 16, 16, 16, 16, 16, 6]
    assert r.count == rounds_for(100, 16, 2) == math.ceil(100 / 16) + 2
    assert r.locate(6) == (2, 0) and r.ending_at(14) == 2 and r.ending_at(13) is None
    assert steps_in_round(0, 100, 16, 2) == 2
    # a first H at or above H: constant rounds
    assert Rounds(100, 16, 16).lengths() == Rounds(100, 16).lengths()
    assert Rounds(3, 16, 2).lengths() == [2, 1]
    with pytest.raises(ValueError, match=">= 1"):
        Rounds(100, 16, 0)


def test_the_planner_counts_the_extra_rounds_bytes() -> None:
    prof = ModelProfile(t_f=0.1, t_b=0.2, t_u=0.0, grad_gb=0.002, activation_gb=0.0, microbatches=1)
    link = [SEED_002_LINKS["cross_continent"]]
    flat = plan_regional(prof, [10**6], link, 400, local_steps=50).to_dict()
    ramp = plan_regional(prof, [10**6], link, 400, local_steps=50, first_local_steps=5)
    d = ramp.to_dict()
    assert flat["rounds"] == 8 and d["rounds"] == Rounds(400, 50, 5).count == 11
    assert (
        d["bytes_over_run"]
        == 11 * d["bytes_per_round"]
        == pytest.approx(flat["bytes_over_run"] * 11 / 8)
    )


def test_the_planners_first_round_is_the_shortest_within_the_sync_fraction() -> None:
    from burst.regional.estimates import choose_first_local_steps, choose_local_steps

    # sync 2 s, steps of 1 s, 10 %: rounds of 20 steps or more keep the fraction
    assert choose_local_steps(2.0, 1.0, 0.1) == 20
    assert choose_first_local_steps(2.0, 1.0, 100, 0.1) == 20  # 20, 40, 80, 100 ...
    assert choose_first_local_steps(2.0, 1.0, 20, 0.1) is None  # H is the shortest already
    assert choose_first_local_steps(2.0, 1.0, 10, 0.1) is None  # H below it: constant, as given
    assert Rounds(300, 100, 20).describe() == "20, 40, 80, 100, 60"
    assert Rounds(300, 100).describe() == "100 x 3" and Rounds(7, 3).describe() == "3 x 2, 1"
