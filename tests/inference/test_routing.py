"""The routing policy (burst/inference/routing.py): the fallback-correctness matrix and the
residency check, on hand-written tier states and a hand-written residency table (the table the
preflight gives for these keys is checked in test_residency.py)."""

from __future__ import annotations

import itertools
import logging
from dataclasses import replace

import pytest

from burst.inference.residency import DataKey, RegionRuling, Residency
from burst.inference.routing import (
    FALLBACK_SLACK_MS,
    CacheEntry,
    Outcome,
    Request,
    Step,
    TierState,
    plan_request,
    run_plan,
)

EDGE, HEAVY = "ap-southeast-1", "me-central-1"
RTT = {frozenset((EDGE, HEAVY)): 204.0}  # 2 x seed 002's 102 ms cross-continent latency
OPEN = DataKey("internal", "SG", EDGE)  # may go anywhere the tiers are
KEPT = DataKey("personal", "SG", EDGE)  # may not leave Singapore without a safeguard
RESIDENCY = Residency(
    {
        OPEN: {
            EDGE: RegionRuling(EDGE, True, "allow", "ok"),
            HEAVY: RegionRuling(HEAVY, True, "allow", "ok"),
        },
        KEPT: {
            EDGE: RegionRuling(EDGE, True, "allow", "ok"),
            HEAVY: RegionRuling(HEAVY, False, "deny", "XFER-NO-SAFEGUARD: no safeguard"),
        },
    }
)
EDGE_TIER = TierState("edge", "distilled", EDGE, service_ms=5.0)
HEAVY_TIER = TierState("heavy", "heavy", HEAVY, service_ms=30.0)
BUDGET = 400.0

FAULTS = {
    "none": (EDGE_TIER, HEAVY_TIER),
    "edge killed": (replace(EDGE_TIER, healthy=False), HEAVY_TIER),
    "edge slowed past deadline": (replace(EDGE_TIER, service_ms=1000.0), HEAVY_TIER),
    "edge queue full": (replace(EDGE_TIER, queue_depth=8), HEAVY_TIER),
    "heavy killed": (EDGE_TIER, replace(HEAVY_TIER, healthy=False)),
    "heavy queue full": (EDGE_TIER, replace(HEAVY_TIER, queue_depth=8)),
    "heavy region unreachable": (EDGE_TIER, replace(HEAVY_TIER, reachable=False)),
}

# (fault, data, fidelity) -> the first step the policy names: (action, tier)
EXPECTED = {
    ("none", OPEN, "standard"): ("serve", "edge"),
    ("none", KEPT, "standard"): ("serve", "edge"),
    ("none", OPEN, "high"): ("serve", "heavy"),
    ("none", KEPT, "high"): ("refuse", None),
    ("edge killed", OPEN, "standard"): ("serve", "heavy"),
    ("edge killed", KEPT, "standard"): ("queue", "edge"),
    ("edge slowed past deadline", OPEN, "standard"): ("serve", "heavy"),
    ("edge slowed past deadline", KEPT, "standard"): ("refuse", None),
    ("edge queue full", OPEN, "standard"): ("serve", "heavy"),
    ("edge queue full", KEPT, "standard"): ("queue", "edge"),
    ("heavy killed", OPEN, "high"): ("queue", "heavy"),
    ("heavy queue full", OPEN, "high"): ("queue", "heavy"),
    ("heavy region unreachable", OPEN, "standard"): ("serve", "edge"),
    ("heavy region unreachable", OPEN, "high"): ("refuse", None),
    ("heavy region unreachable", KEPT, "high"): ("refuse", None),
}


@pytest.mark.parametrize(("fault", "data", "fidelity"), list(EXPECTED), ids=str)
def test_fallback_matrix_first_step(fault: str, data: DataKey, fidelity: str) -> None:
    req = Request("r", data, BUDGET, fidelity)  # type: ignore[arg-type]
    plan = plan_request(req, FAULTS[fault], RESIDENCY, RTT)
    first = plan.steps[0]
    assert (first.action, first.tier) == EXPECTED[(fault, data, fidelity)], plan.describe()
    assert plan.steps[-1].action == "refuse"
    assert all(s.reason for s in plan.skipped)  # every decision carries its reason


@pytest.mark.parametrize(
    ("data", "fails", "expected"),
    [
        (OPEN, set(), ("serve", "edge")),
        (OPEN, {"edge"}, ("serve", "heavy")),  # killed after the plan was made
        (OPEN, {"edge", "heavy"}, ("refuse", None)),
        (KEPT, {"edge"}, ("refuse", None)),  # serve edge fails, queue on edge fails: refuse
    ],
)
def test_run_plan_falls_through_to_the_named_step(
    data: DataKey, fails: set[str], expected: tuple[str, str | None]
) -> None:
    plan = plan_request(Request("r", data, BUDGET), (EDGE_TIER, HEAVY_TIER), RESIDENCY, RTT)
    tried: list[Step] = []

    def attempt(step: Step) -> Outcome:
        tried.append(step)
        return Outcome(step.tier not in fails, "down" if step.tier in fails else "")

    routed = run_plan(plan, attempt)
    assert (routed.served_by.action, routed.served_by.tier) == expected
    assert tried == [s for s, _ in routed.trail]
    # only the plan's own steps were tried, in the plan's order
    assert tried == list(plan.steps[: len(tried)])


def test_a_slow_step_leaves_room_for_its_fallback() -> None:
    plan = plan_request(Request("r", OPEN, BUDGET), (EDGE_TIER, HEAVY_TIER), RESIDENCY, RTT)
    edge, heavy = plan.steps[0], plan.steps[1]
    assert edge.tier == "edge" and heavy.tier == "heavy"
    assert edge.deadline_ms + heavy.expected_ms + FALLBACK_SLACK_MS <= BUDGET
    assert heavy.deadline_ms <= BUDGET


def test_cache_first_when_its_answer_fits() -> None:
    heavy_cached = CacheEntry(EDGE, "heavy")
    plan = plan_request(
        Request("r", OPEN, BUDGET, "high"), FAULTS["none"], RESIDENCY, RTT, heavy_cached
    )
    assert (plan.steps[0].action, plan.steps[1].tier) == ("cache", "heavy")
    edge_cached = CacheEntry(EDGE, "distilled")
    plan = plan_request(
        Request("r", OPEN, BUDGET, "high"), FAULTS["none"], RESIDENCY, RTT, edge_cached
    )
    assert plan.steps[0].action == "serve"  # a distilled answer does not serve high fidelity
    far = CacheEntry(HEAVY, "heavy")
    plan = plan_request(Request("r", KEPT, BUDGET), FAULTS["none"], RESIDENCY, RTT, far)
    assert plan.steps[0].tier == "edge" and any(s.target == "cache" for s in plan.skipped)


def test_unknown_link_is_never_assumed() -> None:
    plan = plan_request(Request("r", OPEN, BUDGET, "high"), FAULTS["none"], RESIDENCY, {})
    assert plan.steps[0].action == "refuse"
    assert any("no link known" in s.reason for s in plan.skipped)


def test_residency_holds_in_every_fault() -> None:
    """0 restricted requests outside the allowed regions: no step of any plan, whatever the
    fault, fidelity, budget or cache, names a region the preflight does not allow."""
    caches = (None, CacheEntry(EDGE, "heavy"), CacheEntry(HEAVY, "heavy"))
    checked = 0
    for fault, data, fidelity, budget, cached in itertools.product(
        FAULTS, (OPEN, KEPT), ("standard", "high"), (50.0, BUDGET, 5000.0), caches
    ):
        req = Request(f"{fault}", data, budget, fidelity)  # type: ignore[arg-type]
        plan = plan_request(req, FAULTS[fault], RESIDENCY, RTT, cached)
        assert plan.regions() <= RESIDENCY.allowed(data), (fault, plan.describe())
        for step in plan.steps:
            only: Step = step

            def attempt(s: Step, only: Step = only) -> Outcome:
                return Outcome(s == only)

            served = run_plan(plan, attempt).served_by
            assert served.region is None or served.region in RESIDENCY.allowed(data)
        checked += 1
    assert checked == len(FAULTS) * 2 * 2 * 3 * 3


def test_unknown_data_key_is_refused() -> None:
    other = DataKey("health", "ID", EDGE)
    plan = plan_request(Request("r", other, BUDGET), FAULTS["none"], RESIDENCY, RTT)
    assert [s.action for s in plan.steps] == ["refuse"]


def test_the_room_left_counts_those_queued_on_the_failing_tier() -> None:
    """When a tier fails, the requests queued on it fail over too: the deadline leaves the
    fallback one service time for each of them."""
    busy = replace(EDGE_TIER, queue_depth=3)
    plan = plan_request(Request("r", OPEN, BUDGET), (busy, HEAVY_TIER), RESIDENCY, RTT)
    edge, heavy = plan.steps[0], plan.steps[1]
    assert (
        edge.deadline_ms
        == BUDGET - heavy.expected_ms - 3 * HEAVY_TIER.service_ms - FALLBACK_SLACK_MS
    )


def test_every_decision_is_logged_with_its_reasons(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="burst.inference.routing")
    plan = plan_request(Request("r7", KEPT, BUDGET, "high"), FAULTS["none"], RESIDENCY, RTT)
    run_plan(plan, lambda s: Outcome(False, "down"))
    text = caplog.text
    assert "route r7: refuse" in text and "XFER-NO-SAFEGUARD" in text  # the plan, with why
    assert "route r7: refused (no lawful tier can answer within the budget)" in text
    caplog.clear()
    plan_request(Request("r8", OPEN, BUDGET), FAULTS["none"], RESIDENCY, RTT, log_decision=False)
    assert "r8" not in caplog.text  # a what-if plan is not a decision
