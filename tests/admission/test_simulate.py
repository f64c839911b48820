"""The queue simulator on tiny hand-made traces (each policy's rule, seen once), its
determinism, and its bad-input line. The benchmark trace runs in benchmarks (not here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burst.admission.simulate import Sim, generate, load_trace, simulate
from burst.errors import BadInputError

REPO = Path(__file__).resolve().parents[2]


def trace(runs: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "flavors": [{"name": "spot", "capacity": "spot", "gpus": 8, "usd_per_gpu_hour": 1.0}],
        "teams": {"a": {"semaphore": 4}, "b": {"semaphore": 4}},
        "checkpoint_every_h": 1.0,
        "emergency_save_s": 36,  # 0.01 h
        "runs": runs,
    }
    doc.update(extra)
    return doc


def run(doc: dict[str, Any], policy: str) -> dict[str, Any]:
    t = load_trace(doc, None, "test")
    return Sim(t, policy).run().summary(t.budgets)


LOW_THEN_HIGH = [
    {"id": "low", "team": "a", "priority": "low", "arrival_h": 0, "gpus": 8, "hours": 3.5},
    {"id": "high", "team": "b", "priority": "high", "arrival_h": 1.5, "gpus": 8, "hours": 1},
]


def test_fifo_keeps_the_high_run_waiting_behind_the_low_one() -> None:
    r = run(trace(LOW_THEN_HIGH), "fifo-semaphore")
    assert r["priority_inversions"] == 1 and r["preemptions"] == 0
    assert r["wait_hours"]["high"]["mean"] == pytest.approx(2.0)


def test_priority_preempts_at_once_and_the_victim_loses_since_its_checkpoint() -> None:
    r = run(trace(LOW_THEN_HIGH), "priority")
    assert r["priority_inversions"] == 0 and r["preemptions"] == 1
    assert r["wait_hours"]["high"]["mean"] == pytest.approx(0.0)
    assert r["lost_gpu_hours_preemption"] == pytest.approx(0.5 * 8)  # 1.5 h done, 1 h committed


def test_burst_preempts_after_the_victims_save_and_loses_nothing() -> None:
    r = run(trace(LOW_THEN_HIGH), "burst")
    assert r["priority_inversions"] == 0 and r["preemptions"] == 1
    assert r["wait_hours"]["high"]["mean"] == pytest.approx(0.01)  # one emergency save
    assert r["lost_gpu_hours_preemption"] == 0
    assert r["emergency_save_gpu_hours"] == pytest.approx(0.01 * 8)


def test_both_queues_pick_victims_by_kueues_rule_burst_saves_first() -> None:
    """One victim rule (burst.admission.policy.victims, Kueue's: lowest priority, then the
    most recently admitted), called by both arms; burst's victim saves first."""
    runs = [
        {"id": "fresh", "team": "a", "priority": "low", "arrival_h": 1.1, "gpus": 4, "hours": 5},
        {"id": "stale", "team": "a", "priority": "low", "arrival_h": 0, "gpus": 4, "hours": 5},
        {"id": "high", "team": "b", "priority": "high", "arrival_h": 2.05, "gpus": 4, "hours": 1},
    ]
    t = load_trace(trace(runs), None, "test")
    burst = Sim(t, "burst")
    burst.run()
    assert [j.id for j in burst.jobs if j.preempted] == ["fresh"]
    assert burst.res.lost_preemption_gpu_h == 0  # its emergency save kept its 0.95 h
    kueue = Sim(t, "priority")
    kueue.run()
    assert [j.id for j in kueue.jobs if j.preempted] == ["fresh"]
    assert kueue.res.lost_preemption_gpu_h == pytest.approx(0.95 * 4)


def test_a_run_waiting_for_gpus_rents_nothing_in_burst_and_in_the_old_order_does() -> None:
    r = {"id": "first", "team": "a", "priority": "normal", "arrival_h": 0, "gpus": 8, "hours": 2}
    second = {**r, "id": "second", "arrival_h": 0.5}
    doc = trace([r, second])
    assert run(doc, "burst")["gpu_hours_rented_while_queued"] == 0
    # the order before issue 47: provision rented the nodes, then Kueue queued the pod
    assert run(doc, "priority")["gpu_hours_rented_while_queued"] == pytest.approx(1.5 * 8)


def test_a_team_over_its_budget_waits_then_gets_what_is_left() -> None:
    """The runtime's decision (policy.decide): queued while open reservations hold the budget,
    then admitted with what is left and stopped there: spent to the limit, never past it."""
    runs = [
        {"id": f"r{i}", "team": "a", "priority": "normal", "arrival_h": 0, "gpus": 1, "hours": 1}
        for i in range(3)
    ]
    doc = trace(runs, teams={"a": {"semaphore": 4, "budget_usd": 5}, "b": {}})
    doc["budget_hours_factor"] = 2.0  # each reserves $2: two fit in $5, the third queues
    b = run(doc, "burst")
    assert b["queued_for_budget"] == 1 and b["refused"] == 0
    assert b["stopped_by_budget_guard"] == 0 and b["spend_usd"]["a"] == pytest.approx(3.0)
    doc["runs"] = [*runs, {**runs[0], "id": "big", "hours": 4, "arrival_h": 2.5}]  # $8: never
    b = run(doc, "burst")
    assert b["budget_overruns"] == 0 and b["stopped_by_budget_guard"] == 1
    assert b["spend_usd"]["a"] == pytest.approx(5.0)  # the last run got the $ left


def test_budgets_refuse_in_burst_and_overrun_in_the_baselines() -> None:
    runs = [
        {"id": f"r{i}", "team": "a", "priority": "normal", "arrival_h": i, "gpus": 1, "hours": 1}
        for i in range(4)
    ]
    doc = trace(runs, teams={"a": {"semaphore": 4, "budget_usd": 5}, "b": {}})
    doc["budget_hours_factor"] = 2.0  # each reserves $2: two fit in $5, not three
    fifo = run(doc, "fifo-semaphore")
    assert fifo["budget_overruns"] == 0  # $4 spent of $5: the baseline just spends
    doc["runs"] = runs + [
        {"id": f"s{i}", "team": "a", "priority": "normal", "arrival_h": 0, "gpus": 1, "hours": 1}
        for i in range(4)
    ]
    assert run(doc, "fifo-semaphore")["budget_overrun_usd"] == pytest.approx(3.0)
    burst = run(doc, "burst")
    assert burst["budget_overruns"] == 0 and burst["refused"] > 0
    assert sum(burst["spend_usd"].values()) <= 5.0


def test_a_spot_window_loses_work_in_the_baselines_not_in_burst() -> None:
    runs = [{"id": "r", "team": "a", "priority": "normal", "arrival_h": 0, "gpus": 8, "hours": 3}]
    doc = trace(runs, capacity_windows=[{"flavor": "spot", "start_h": 1.5, "end_h": 2, "gpus": 0}])
    assert run(doc, "priority")["lost_gpu_hours_spot"] == pytest.approx(0.5 * 8)
    b = run(doc, "burst")
    assert b["lost_gpu_hours_spot"] == 0 and b["completed"] == 1  # delayed, never deactivated


def test_generated_traces_are_deterministic_and_the_goals_are_reported() -> None:
    gen = {"runs": 20, "hours": 12, "teams": {"a": 0.5, "b": 0.5}}
    assert generate(gen, 3) == generate(gen, 3) != generate(gen, 4)
    doc = trace([], generate=gen)
    one, two = simulate(load_trace(doc, 3, "t")), simulate(load_trace(doc, 3, "t"))
    assert one == two
    assert set(one["goals"]) == {
        "zero_inversions",
        "zero_overruns",
        "lost_at_most_half_of_baselines",
        "utilisation_within_5pct_of_best_baseline",
        "zero_gpu_hours_rented_while_queued",
        "over_demand_teams_use_95_to_100pct",
    }


def test_a_bad_trace_is_one_line_naming_the_run() -> None:
    doc = trace([{"id": "x", "team": "zz", "arrival_h": 0, "gpus": 1, "hours": 1}])
    with pytest.raises(BadInputError) as info:
        load_trace(doc, None, "test")
    assert info.value.one_line() == "test: run x: team 'zz' is not in teams"
