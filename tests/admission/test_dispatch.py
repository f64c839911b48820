"""Multi-region dispatch (burst/admission/dispatch.py, issue 47): the law first, then the
team's flavor and its free quota, the plan's order among equals, and a resumed run pinned to
its checkpoint's region unless moving is cheaper, counting egress. Also the two policy changes
that came with it: a run still queued at its deadline gets what its team has left, and the
queue simulator's fair utilisation (one horizon, work within budget)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burst.admission.admit import admit
from burst.admission.dispatch import Pin, RegionQueue, dispatch, kueue_queues, name
from burst.admission.kueue_reader import TeamQueue
from burst.admission.ledger import Ledger
from burst.admission.simulate import load_trace, simulate
from burst.documents.plan import Candidate
from burst.spec import BurstJob, load_spec
from burst.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]


def cand(region: str, price: float, capacity: str = "on_demand", gpus: int = 8) -> Candidate:
    return Candidate.model_validate({"region": region, "provider": "aws", "capacity": capacity,
                                     "price_per_hour": price, "gpus": gpus})  # fmt: skip


def queues(free: dict[str, int | None]) -> Any:
    """Each region's free GPUs of the team's flavor (absent: no flavor covers it)."""
    return lambda c: RegionQueue(c.region if c.region in free else None, free.get(c.region))


def test_a_region_the_law_denies_is_never_dispatched_to_even_cheapest_and_free() -> None:
    plan = [cand("eu-central-1", 10.0), cand("us-east-1", 30.0), cand("ap-south-1", 20.0)]
    free = queues({"eu-central-1": 64, "us-east-1": 64, "ap-south-1": 0})
    got = dispatch(plan, [("aws", "eu-central-1")], free)
    assert [c.region for c in got.order] == ["us-east-1"]
    assert got.wait_in is not None and got.wait_in.region == "us-east-1"
    assert {(s.candidate.region, s.reason) for s in got.skipped} == {
        ("eu-central-1", "law"), ("ap-south-1", "full")
    }  # fmt: skip
    # not as the queue to wait in, nor as the place a pinned checkpoint stays
    pinned = Pin("eu-central-1", "aws", checkpoint_gb=1e5, remaining_hours=10,
                 egress_usd_per_gb=0.02)  # fmt: skip
    for pin in (None, pinned):
        every = dispatch(plan, [("aws", "eu-central-1")], queues({"ap-south-1": 0}), pin)
        assert "eu-central-1" not in [c.region for c in every.candidates()]


def test_the_plans_order_is_kept_among_equal_queues() -> None:
    plan = [cand(r, 20.0) for r in ("us-west-2", "us-east-1", "eu-west-1", "ap-south-1")]
    got = dispatch(plan, [], queues({"us-west-2": 8, "us-east-1": 4, "eu-west-1": 8,
                                     "ap-south-1": 16}))  # fmt: skip
    assert [c.region for c in got.order] == ["us-west-2", "eu-west-1", "ap-south-1"]
    assert [s.reason for s in got.skipped] == ["full"]
    # every queue full: the run waits in the plan's first, and that is what provision tries
    full = dispatch(plan, [], queues(dict.fromkeys(("us-west-2", "us-east-1", "eu-west-1"), 0)))
    assert full.order == [] and [c.region for c in full.candidates()] == ["us-west-2"]
    assert [s.reason for s in full.skipped] == ["full", "full", "full", "no_flavor"]


def test_a_resumed_run_stays_with_a_big_checkpoint_and_moves_when_egress_is_small() -> None:
    """The pinned region (us-east-1) is full; us-west-2 has room at the same price. Moving
    pays egress and the restart; staying pays the hours waited."""
    plan = [cand("us-west-2", 40.0), cand("us-east-1", 40.0)]
    free = queues({"us-west-2": 8, "us-east-1": 0})

    def pin(gb: float, waited_h: float) -> Pin:
        return Pin("us-east-1", "aws", checkpoint_gb=gb, remaining_hours=20,
                   egress_usd_per_gb=0.02, waited_h=waited_h, restore_s=600)  # fmt: skip

    def regions(gb: float, waited_h: float) -> tuple[list[str], str | None]:
        got = dispatch(plan, [], free, pin(gb, waited_h))
        return [c.region for c in got.order], got.wait_in.region if got.wait_in else None

    # a small checkpoint, but not full long enough: the move's cost (egress + restart +
    # margin $80 at $40/h x 20 h x 0.1) beats an hour of waiting ($40): it stays pinned
    assert regions(100, 1.0) == ([], "us-east-1")
    # full for 4 h ($160 of waiting): it moves, the pinned region kept after the movers
    assert regions(100, 4.0) == (["us-west-2"], "us-west-2")
    # 200 TB ($4,000 of egress): still pinned after the same wait, and after a day of it
    assert regions(200_000, 4.0) == ([], "us-east-1")
    assert regions(200_000, 24.0) == ([], "us-east-1")
    got = dispatch(plan, [], free, pin(200_000, 24.0))
    assert [s.reason for s in got.skipped] == ["full", "pinned"]
    assert got.move is not None and not got.move.move and "egress $4,000.00" in got.move.reason
    # the pinned region has room: it stays, however small the checkpoint (same price)
    room = dispatch(plan, [], queues({"us-west-2": 8, "us-east-1": 8}), pin(1, 100.0))
    assert [c.region for c in room.order] == ["us-east-1"]


def test_a_resumed_run_moves_when_elsewhere_is_cheaper_by_more_than_the_move() -> None:
    plan = [cand("us-west-2", 10.0, "spot"), cand("us-east-1", 40.0)]
    free = queues({"us-west-2": 8, "us-east-1": 8})
    small = Pin("us-east-1", "aws", checkpoint_gb=10, remaining_hours=20, egress_usd_per_gb=0.02)
    assert [c.region for c in dispatch(plan, [], free, small).order] == ["us-west-2", "us-east-1"]
    big = Pin("us-east-1", "aws", checkpoint_gb=100_000, remaining_hours=20,
              egress_usd_per_gb=0.02)  # fmt: skip
    assert [c.region for c in dispatch(plan, [], free, big).order] == ["us-east-1"]


def test_kueue_queue_state_is_the_flavors_quota_less_what_kueue_reserved() -> None:
    """The shipped ClusterQueue of a team, with a status as Kueue writes it."""
    import yaml

    job = load_spec(REPO / "examples" / "quickstart.yaml")
    kueue = REPO / "deploy" / "kueue"
    flavors = [d for d in yaml.safe_load_all((kueue / "flavors.yaml").read_text()) if d]
    cqs = [d for d in yaml.safe_load_all((kueue / "clusterqueues.yaml").read_text()) if d]
    cq = next(q for q in cqs if q["metadata"]["name"] == job.team)
    c = Candidate(region="ap-southeast-1", provider="aws", capacity="spot", gpus=8, nodes=1,
                  gpu_type=job.compute.gpu_type)  # fmt: skip
    state = kueue_queues(job, TeamQueue(f"burst-{job.team}", cq, flavors))(c)
    assert state.flavor == "h100-ap-southeast-1-spot"
    assert state.free_gpus is not None and state.free_gpus >= 8
    taken = {**cq, "status": {"flavorsReservation": [
        {"name": state.flavor, "resources": [{"name": "nvidia.com/gpu",
                                               "total": str(state.free_gpus)}]}]}}  # fmt: skip
    full = kueue_queues(job, TeamQueue(f"burst-{job.team}", taken, flavors))(c)
    assert full == RegionQueue(state.flavor, 0)
    assert dispatch([c], [], lambda _: full).skipped[0].reason == "full"
    assert name(c) == "aws/ap-southeast-1 spot"


@pytest.mark.xfail(
    strict=True,
    reason="the floor's own podSet is off (burst.admission.podsets.SPLIT_FLOOR): the engines "
    "tier's Kueue v0.17.0 admitted no two-podSet Workload",
)
def test_a_floor_runs_queue_is_full_when_its_on_demand_flavor_is(job_16: BurstJob) -> None:
    """An AWS spot run of 2 nodes with a floor of 1 needs 8 GPUs of the spot flavor and 8 of
    the on-demand one: with spot free and on-demand taken, its queue has no room."""
    import yaml

    kueue = REPO / "deploy" / "kueue"
    flavors = [d for d in yaml.safe_load_all((kueue / "flavors.yaml").read_text()) if d]
    cqs = [d for d in yaml.safe_load_all((kueue / "clusterqueues.yaml").read_text()) if d]
    cq = next(q for q in cqs if q["metadata"]["name"] == job_16.team)
    c = Candidate(region="ap-southeast-3", provider="aws", capacity="spot_with_floor", gpus=16,
                  nodes=2, floor_nodes=1, gpu_type="h100")  # fmt: skip
    state = kueue_queues(job_16, TeamQueue(f"burst-{job_16.team}", cq, flavors))(c)
    assert state.flavor == "h100-ap-southeast-3-spot"
    assert state.floor is not None and state.floor.flavor == "h100-ap-southeast-3-ondemand"
    assert state.floor.need_gpus == 8 and dispatch([c], [], lambda _: state).order == [c]
    od = state.floor.flavor
    taken = {**cq, "status": {"flavorsReservation": [
        {"name": od, "resources": [{"name": "nvidia.com/gpu",
                                    "total": str(state.floor.free_gpus)}]}]}}  # fmt: skip
    full = kueue_queues(job_16, TeamQueue(f"burst-{job_16.team}", taken, flavors))(c)
    assert full.free_gpus == state.free_gpus  # spot still has room
    got = dispatch([c], [], lambda _: full)
    assert got.order == [] and [s.reason for s in got.skipped] == ["full"]
    assert got.skipped[0].detail == f"flavor {od} has 0 GPU(s) free, needs 8"


def test_the_pin_and_the_move_rule_share_one_definition_of_the_moves_cost() -> None:
    """Dispatch's pin carries the move rule's own cost terms (burst.recovery.MoveCost), not a
    copy: each term it holds reaches the rule's verdict."""
    import dataclasses

    from burst.recovery import MoveCost, MoveInputs

    for cls in (Pin, MoveInputs):
        assert issubclass(cls, MoveCost)
        own = {f.name: f for f in dataclasses.fields(cls)}
        assert all(own[f.name] is f for f in dataclasses.fields(MoveCost))  # not redeclared
    plan = [cand("us-west-2", 40.0), cand("us-east-1", 40.0)]
    free = queues({"us-west-2": 8, "us-east-1": 0})
    base = Pin("us-east-1", "aws", checkpoint_gb=1, remaining_hours=20, egress_usd_per_gb=0.02,
               waited_h=1.0)  # fmt: skip

    def cost(pin: Pin) -> float:
        move = dispatch(plan, [], free, pin).move
        assert move is not None
        return move.cost_usd + move.margin_usd

    for f in dataclasses.fields(MoveCost):
        if f.name != "egress_usd_per_gb":  # (priced per GB: checkpoint_gb moves it)
            bumped = dataclasses.replace(base, **{f.name: getattr(base, f.name) + 100})
            assert cost(bumped) > cost(base), f.name


@pytest.fixture
def job_16() -> BurstJob:
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    return job.model_copy(update={"compute": job.compute.model_copy(update={"gpu_count": 16})})


def test_a_run_still_queued_at_its_deadline_gets_what_its_team_has_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BURST_LEASE_SETTLE_S", "0")
    job: BurstJob = load_spec(REPO / "examples" / "quickstart.yaml")
    ledger = Ledger(LocalStore(tmp_path / "ledger", fsync=False), lock_wait_s=5)
    ledger.set_teams(f"teams:\n  {job.team}:\n    day: {{usd: 100}}\n", "t.yaml")

    def usd(x: float) -> Candidate:
        return Candidate(region="r", provider="aws", capacity="spot", gpus=8,
                         price_per_hour=x / job.budget.max_hours)  # fmt: skip

    admit(ledger, job, "holder", [usd(60)])
    got = admit(ledger, job, "patient", [usd(60)], wait_s=0.2, poll_s=0.05)
    assert got.state == "admitted" and got.reserved_usd == pytest.approx(40)
    assert "admitted with the $40.00 left" in str(got.refusal)


def test_fair_utilisation_counts_one_horizon_and_only_work_a_budget_allowed() -> None:
    """Team a's budget buys 4 of its 8 GPU-hours: the baselines run all 8 (an overrun), burst
    stops at the limit. Raw utilisation counts the overrun; the fair figure does not."""
    doc = {
        "flavors": [{"name": "spot", "capacity": "spot", "gpus": 8, "usd_per_gpu_hour": 1.0}],
        "teams": {"a": {"semaphore": 4, "budget_usd": 4}},
        "budget_hours_factor": 1.0,
        "runs": [{"id": "r", "team": "a", "priority": "normal", "arrival_h": 0, "gpus": 1,
                  "hours": 8}],
    }  # fmt: skip
    report = simulate(load_trace(doc, None, "t"))
    fifo, burst = report["policies"]["fifo-semaphore"], report["policies"]["burst"]
    assert fifo["useful_gpu_hours"] == pytest.approx(8) and fifo["budget_overruns"] == 1
    assert fifo["useful_gpu_hours_within_budget"] == pytest.approx(4)
    assert burst["useful_gpu_hours_within_budget"] == pytest.approx(4)
    assert report["utilisation_definition"]["horizon_hours"] == pytest.approx(8)
    # one denominator (8 GPUs x 8 h) for both, though burst stopped after 4 h
    assert fifo["utilisation_fair"] == burst["utilisation_fair"] == pytest.approx(4 / 64)
    # raw: each arm over its own horizon (burst's ends at 4 h), the overrun counted
    assert burst["utilisation"] == pytest.approx(4 / 32) and fifo["utilisation"] == 8 / 64


def test_plan_explain_names_the_dispatch_order_and_the_region_the_law_denies() -> None:
    from burst.admission.dispatch import dispatch_lines

    doc = {
        "candidates": [cand("us-east-1", 30.0).model_dump(), cand("us-west-2", 20.0).model_dump()],
        "excluded": [{"provider": "aws", "region": "eu-central-1", "verdict": "deny",
                      "reason": "data residency"}],
    }  # fmt: skip
    assert dispatch_lines(doc) == [
        "dispatch order: 1. aws/us-east-1 on_demand, 2. aws/us-west-2 on_demand",
        "  wait in: aws/us-east-1 on_demand (when no queue has room)",
        "  never dispatched to aws/eu-central-1: law (data residency)",
    ]
