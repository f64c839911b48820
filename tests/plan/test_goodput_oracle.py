"""The event-driven simulator agrees with a step-by-step reimplementation (tests/plan/stepwise.py)
on random traces and parameters."""

from __future__ import annotations

import random

import pytest

from burst.plan.goodput import SimParams, TraceArrivals, simulate_once

from . import stepwise


@pytest.mark.parametrize("case", range(40))
def test_event_simulator_matches_stepwise_oracle(case: int) -> None:
    rng = random.Random(case)
    step = rng.choice([0.5, 1.0, 2.0])
    every = rng.randint(1, 30)
    steps = rng.randint(50, 400)
    c = rng.uniform(0.0, 5.0)
    u = rng.uniform(0.0, 40.0)
    notice = rng.choice([0.0, rng.uniform(0.0, 60.0)])
    restart = rng.uniform(0.0, 30.0)
    horizon = steps * step * 2.5
    trace = sorted(rng.uniform(1.0, horizon) for _ in range(rng.randint(0, 12)))

    want = stepwise.run(
        steps=steps, step_s=step, every=every, c=c, u=u, notice=notice, restart=restart, trace=trace
    )
    p = SimParams(notice_s=notice, checkpoint_cost_s=c, step_s=step, upload_s=u, restart_s=restart)
    got = simulate_once(p, every * step, TraceArrivals(trace), steps * step)
    assert got.preemptions == want.preemptions
    assert got.emergency_saves == want.emergency_saves
    assert got.checkpoints == want.checkpoints
    assert got.paid_s == pytest.approx(want.paid_s, abs=1e-6)
    assert got.lost_seconds == pytest.approx(want.lost_s, abs=1e-6)
