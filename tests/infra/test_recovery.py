"""The named recovery strategies (burst/recovery.py): where a requeue goes, when a restart is
allowed, and the expressions the compiled template evaluates (pure: no Terraform)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.documents.plan import Candidate
from burst.documents.provision import RecoveryRecord
from burst.errors import BadInputError, CapacityError
from burst.recovery import (
    RETRY_IN_PLACE,
    give_up_when,
    requeue_when,
    restart_when,
    strategy_for,
    template_parameters,
)
from burst.runner import expr
from burst.spec import BurstJob, load_spec


def _job(quickstart_in: Path, **recovery: Any) -> BurstJob:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["compute"]["recovery"] = recovery
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_spec(quickstart_in)


def _c(region: str, capacity: str = "spot", provider: str = "aws") -> Candidate:
    return Candidate.model_validate({"region": region, "provider": provider, "capacity": capacity})


A, B, C = "ap-southeast-1", "ap-southeast-3", "me-central-1"
PLAN = [_c(A), _c(B), _c(C), _c(A, "on_demand"), _c(B, "on_demand")]


def _land(job: BurstJob, previous: RecoveryRecord | None, event: str, landed: int) -> Any:
    """One placement: what the strategy orders, landing on ``landed`` (an index in it)."""
    s = strategy_for(job)
    placement = s.place(PLAN, previous, event)
    return placement, s.placed(placement, placement.candidates[landed], PLAN)


def test_requeue_after_a_capacity_failover_goes_to_a_third_region(quickstart_in: Path) -> None:
    """Bug 2 of issue 25: no capacity in A, train lands in B (the plan's second), is lost
    there and requeued: it must go on to C, not back to B (the old index + 1 skipped one
    candidate of the plan, and the provisioner put the region that succeeded first)."""
    job = _job(quickstart_in)
    _, record = _land(job, None, "start", 1)  # A had no capacity: B
    assert record.candidate.region == B and record.may_requeue
    requeue, _ = _land(job, record, "requeue", 0)
    assert [c.region for c in requeue.candidates][:2] == [C, A]
    assert B not in [c.region for c in requeue.candidates if c.capacity == "spot"]
    assert requeue.record.history[-1].region == B
    assert requeue.record.history[-1].ended == "requeue"


def test_the_region_just_left_comes_last_and_on_demand_after_n_spot_losses(
    quickstart_in: Path,
) -> None:
    job = _job(quickstart_in, preemptions_per_region=1, on_demand_after=4)
    _, record = _land(job, None, "start", 0)  # A, spot
    requeue, record = _land(job, record, "requeue", 0)
    order = [(c.region, c.capacity) for c in requeue.candidates]
    assert order == [(B, "spot"), (C, "spot"), (B, "on_demand"), (A, "on_demand")]
    assert requeue.record.spot_losses == 2  # the retry in place and the loss before requeue
    assert record.candidate.region == B
    again, _ = _land(job, record, "requeue", 0)
    assert again.record.spot_losses == 4  # reached on_demand_after: on-demand first
    assert [c.capacity for c in again.candidates][:2] == ["on_demand", "on_demand"]


def test_eager_next_region_has_no_retry_in_place(quickstart_in: Path) -> None:
    job = _job(quickstart_in, strategy="eager_next_region", preemptions_per_region=5)
    assert strategy_for(job).name == "eager_next_region"
    assert template_parameters(job) == {"preemptions-per-region": "0"}
    assert template_parameters(_job(quickstart_in)) == {"preemptions-per-region": "3"}


def test_placements_and_restarts_are_bounded(quickstart_in: Path) -> None:
    job = _job(quickstart_in, max_placements=2, max_restarts_on_kill=1)
    _, record = _land(job, None, "start", 0)
    assert record.may_requeue and record.may_restart
    restart, record = _land(job, record, "restart", 0)
    assert [c.region for c in restart.candidates] == [A]  # the same placement
    assert record.restarts == 1 and not record.may_restart  # the count is spent
    _, record = _land(job, record, "requeue", 0)
    assert record.candidate.region == B and not record.may_requeue  # 2 placements
    assert not record.may_restart  # restarts are counted per run, not per placement


def test_no_candidate_left_is_a_capacity_error_and_bad_events_are_refused(
    quickstart_in: Path,
) -> None:
    job = _job(quickstart_in, max_placements=10)
    s = strategy_for(job)
    record = None
    for _ in range(len(PLAN)):
        placement = s.place(PLAN, record, "start" if record is None else "requeue")
        record = s.placed(placement, placement.candidates[0], PLAN)
    assert record is not None and not record.may_requeue  # every candidate was used
    with pytest.raises(CapacityError, match="no candidate left"):
        s.place(PLAN, record, "requeue")
    with pytest.raises(BadInputError, match="recovery event"):
        s.place(PLAN, record, "again")
    with pytest.raises(BadInputError, match="names no candidate"):
        s.place(PLAN, RecoveryRecord(strategy="failover", event="start"), "restart")


def test_the_spec_refuses_an_unknown_strategy(quickstart_in: Path) -> None:
    from burst.spec import SpecError

    with pytest.raises(SpecError, match=r"compute\.recovery\.strategy"):
        _job(quickstart_in, strategy="pray")


@pytest.mark.parametrize(
    ("code", "message", "retried"),
    [
        ("75", "", True),
        ("76", "", False),  # moved back to spot: never retried in the placement it left
        ("4", "", True),
        ("-1", "pod deleted", True),
        ("137", "OOMKilled (exit code 137)", False),  # restarted by place, bounded per run
        ("1", "", False),
        ("2", "", False),
    ],
)
def test_retry_in_place_expression(code: str, message: str, retried: bool) -> None:
    """Argo's lastRetry scope: exitCode is a string, "-1" when the pod left none
    (operator.go, buildRetryStrategyLocalScope)."""
    last = {"exitCode": code, "message": message, "status": "Failed", "duration": "5"}
    assert bool(expr.evaluate(expr.parse(RETRY_IN_PLACE), {"lastRetry": last})) is retried


@pytest.mark.parametrize(
    ("status", "code", "may", "decision"),
    [
        ("Failed", "75", (True, True, True), "requeue"),
        ("Failed", "76", (True, True, True), "requeue"),  # moved back to spot: at once
        # Kueue took the quota (exit 76): no other candidate, but it waits here again
        ("Failed", "76", (False, True, True), "requeue"),
        ("Failed", "76", (False, True, False), "give-up"),  # budgets spent
        ("Error", None, (True, True, True), "requeue"),  # node lost: no exit code at all
        ("Failed", "137", (True, True, True), "restart"),
        ("Failed", "137", (True, False, True), "give-up"),  # restarts spent
        ("Failed", "75", (False, True, True), "give-up"),  # no placement left
        ("Failed", "1", (True, True, True), "give-up"),
        ("Succeeded", "0", (True, True, True), None),
    ],
)
def test_place_decisions(
    status: str, code: str | None, may: tuple[bool, bool, bool], decision: str | None
) -> None:
    train: dict[str, Any] = {"status": status}
    if code is not None:
        train["exitCode"] = code
    record = {"recovery": {"may_requeue": may[0], "may_restart": may[1], "may_wait_again": may[2]}}
    scope = {"steps": {"train": train, "provision": {"outputs": {"parameters": {}}}}}
    scope["steps"]["provision"]["outputs"]["parameters"]["infra"] = json.dumps(record)
    chosen = [
        name
        for name, when in (
            ("requeue", requeue_when()),
            ("restart", restart_when()),
            ("give-up", give_up_when()),
        )
        if expr.evaluate(expr.parse(when), scope)
    ]
    assert chosen == ([decision] if decision else [])


def test_a_plan_candidate_without_a_capacity_is_the_specs_kind(quickstart_in: Path) -> None:
    """Provision records the capacity it applied (the spec's first kind when the plan gave
    none): a restart still finds that candidate, and a requeue never goes back to it."""
    job = _job(quickstart_in)
    s = strategy_for(job)
    plan = [Candidate(region=A, provider="aws"), Candidate(region=B, provider="aws")]
    first = s.place(plan, None, "start")
    applied = plan[0].model_copy(update={"capacity": "spot"})  # what provision records
    record = s.placed(first, applied, plan)
    assert [c.region for c in s.place(plan, record, "restart").candidates] == [A]
    assert [c.region for c in s.place(plan, record, "requeue").candidates] == [B]
