"""The Young/Daly interval and the pre-emption simulator (burst simulate)."""

from __future__ import annotations

import json
import math
import random
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.plan.goodput import (
    PoissonArrivals,
    SimParams,
    TraceArrivals,
    read_trace,
    simulate,
    simulate_once,
    young_daly_report,
)
from burst.plan.interval import choose_interval, job_mtbf_s, young_daly


def test_young_daly_formula_and_clamp() -> None:
    assert young_daly(5, 3600) == pytest.approx(math.sqrt(2 * 5 * 3600))
    free = choose_interval(5, 3600, upload_s=10)
    assert free.interval_s == pytest.approx(189.7366, rel=1e-5)
    clamped = choose_interval(5, 3600, upload_s=300)
    assert clamped.interval_s == 300 and clamped.young_daly_s < 300
    assert "upload" in clamped.reason
    assert choose_interval(0.001, 10, upload_s=0, step_s=2).interval_s == 2
    assert job_mtbf_s(8, 4) == pytest.approx(2 * 3600)
    with pytest.raises(ValueError):
        young_daly(1, 0)


def test_trace_replay_by_hand_no_usable_notice() -> None:
    # step 1 s, checkpoint 2 s, upload 10 s, restart 50 s, every 20 s, 100 s of work,
    # one pre-emption at t=45 without notice. Worked by hand in docs/planning.md.
    p = SimParams(notice_s=0, checkpoint_cost_s=2, step_s=1, upload_s=10, restart_s=50)
    r = simulate_once(p, 20, TraceArrivals([45.0]), 100)
    assert r.preemptions == 1 and r.emergency_saves == 0
    assert r.lost_seconds == pytest.approx(21)  # work 41 at the kill, 20 committed
    assert r.checkpoint_blocking_s == pytest.approx(10)  # 5 checkpoints x 2 s
    assert r.restart_s == 50
    assert r.paid_s == pytest.approx(181)
    assert r.goodput == pytest.approx(100 / 181)


def test_trace_replay_by_hand_emergency_save_in_the_notice() -> None:
    p = SimParams(notice_s=30, checkpoint_cost_s=2, step_s=1, upload_s=10, restart_s=50)
    r = simulate_once(p, 20, TraceArrivals([45.0]), 100)
    assert r.emergency_saves == 1 and r.lost_seconds == 0
    assert r.notice_idle_s == pytest.approx(30)
    assert r.paid_s == pytest.approx(188)


def test_a_trace_event_carries_its_own_notice() -> None:
    """A mixed trace (a notice, then a node lost without one): each event as its own hand case
    above; the params' notice_s is only the default."""
    p = SimParams(notice_s=30, checkpoint_cost_s=2, step_s=1, upload_s=10, restart_s=50, work_s=100)
    mixed = simulate(p, 20, trace=[45.0, 45.0 + 188.0 - 100.0 + 1e-9], notices=[30.0, 0.0])
    assert mixed.emergency_saves == 1 and mixed.preemptions == 2
    assert mixed.lost_seconds > 0  # the second event had no notice: work since the commit lost
    same = simulate(p, 20, trace=[45.0], notices=[30.0])
    assert same.paid_s == pytest.approx(188)
    assert simulate(p, 20, trace=[45.0], notices=[0.0]).paid_s == pytest.approx(181)
    with pytest.raises(BadInputError, match="2 notices for a trace of 1"):
        simulate(p, 20, trace=[45.0], notices=[0.0, 1.0])


@pytest.mark.parametrize("interval", [7.0, 60.0, 400.0])
def test_paid_time_splits_exactly(interval: float) -> None:
    p = SimParams(
        mtbf_s=500, notice_s=20, checkpoint_cost_s=3, step_s=1.5, upload_s=25, restart_s=40
    )
    r = simulate_once(p, interval, PoissonArrivals(500, random.Random(7)), 20_000)
    assert r.preemptions > 10
    parts = (
        r.work_s
        + r.lost_seconds
        + r.checkpoint_blocking_s
        + r.upload_wait_s
        + r.notice_idle_s
        + r.restart_s
    )
    assert r.paid_s == pytest.approx(parts)


def test_deterministic_by_seed() -> None:
    p = SimParams(mtbf_s=3600, notice_s=120, checkpoint_cost_s=5)
    a = simulate(p, 200, seed=3, replicas=5)
    b = simulate(p, 200, seed=3, replicas=5)
    c = simulate(p, 200, seed=4, replicas=5)
    assert a == b
    assert a.goodput != c.goodput


def test_no_preemptions_goodput_is_checkpoint_overhead_only() -> None:
    p = SimParams(checkpoint_cost_s=5, upload_s=10, step_s=1, work_s=1000)
    s = simulate(p, 100, replicas=1)
    assert s.preemptions == 0
    assert s.goodput == pytest.approx(1000 / (1000 + 9 * 5))  # checkpoints at 100..900


@pytest.mark.parametrize(
    ("params", "clamped"),
    [
        (SimParams(mtbf_s=3600, notice_s=120, checkpoint_cost_s=5), True),  # the case
        (SimParams(mtbf_s=3600, notice_s=0, checkpoint_cost_s=5, upload_s=20), False),
        (
            SimParams(mtbf_s=7200, notice_s=30, checkpoint_cost_s=20, upload_s=60, restart_s=120),
            False,
        ),
    ],
)
def test_goodput_peaks_near_young_daly(params: SimParams, clamped: bool) -> None:
    doc = young_daly_report(params, seed=0, replicas=20)
    by = {c["factor"]: c["goodput"] for c in doc["comparison"]}
    assert by[1.0] > by[0.25] and by[1.0] > by[4.0]
    assert doc["peak_near_young_daly"] is True
    assert (doc["young_daly_interval_s"] < doc["default_interval_s"]) == clamped
    # a finer sweep: nothing is much better than the Young/Daly interval
    yd = doc["default_interval_s"]
    sweep = [simulate(params, yd * f, replicas=20).goodput for f in (0.5, 0.7, 1.4, 2.0)]
    assert max(sweep) < by[1.0] + 0.01


@pytest.mark.e2e
def test_cli_simulate_json_done_when(burst_cmd: list[str], tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    proc = subprocess.run(
        [
            *burst_cmd,
            "simulate",
            "--mtbf",
            "3600",
            "--notice",
            "120",
            "--checkpoint-cost",
            "5",
            "--json",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    for key in ("goodput", "lost_seconds", "young_daly_interval_s"):
        assert key in doc
    assert 0 < doc["goodput"] < 1 and doc["lost_seconds"] > 0
    by = {c["factor"]: c["goodput"] for c in doc["comparison"]}
    assert by[1.0] > by[0.25] and by[1.0] > by[4.0]
    assert json.loads(out.read_text()) == doc


def test_cli_simulate_trace_and_text(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("# pre-emptions\n1800\n5400\n9000.5\n")
    proc = burst_cli(["simulate", "--trace", str(trace), "--checkpoint-cost", "5"])
    assert proc.returncode == 0, proc.stderr
    assert "goodput" in proc.stdout and "Young/Daly interval" in proc.stdout
    assert "(trace, 1 run(s), 3 pre-emptions a run)" in proc.stdout


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ([], "give --mtbf SECONDS or --trace FILE"),
        (["--mtbf", "-5"], "mtbf must be > 0"),
        (["--mtbf", "100", "--step-time", "0"], "step-time must be > 0"),
        (["--mtbf", "100", "--interval", "0"], "--interval must be > 0"),
    ],
)
def test_cli_simulate_bad_arguments(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], args: list[str], needle: str
) -> None:
    proc = burst_cli(["simulate", *args])
    assert proc.returncode == 2
    assert needle in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_bad_trace_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("100\nsoon\n")
    with pytest.raises(BadInputError, match="not a number") as exc:
        read_trace(bad)
    assert exc.value.where == f"{bad}:2"
    js = tmp_path / "t.json"
    js.write_text("[10, -1]")
    with pytest.raises(BadInputError, match="entry 1"):
        read_trace(js)
    js.write_text("[30, 10]")
    assert read_trace(js) == [10.0, 30.0]
    empty = tmp_path / "e.txt"
    empty.write_text("# nothing\n")
    with pytest.raises(BadInputError, match="no pre-emption"):
        read_trace(empty)


def test_cli_simulate_mtbf_inf_names_the_option(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    """``--mtbf inf`` was given: the answer names it (issue 25 bug 8; it said "give --mtbf
    SECONDS or --trace FILE", as if no --mtbf had been given)."""
    proc = burst_cli(["simulate", "--mtbf", "inf"])
    assert proc.returncode == 2
    assert "--mtbf must be a finite number of seconds" in proc.stderr
    assert "give --mtbf" not in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
