"""Back to spot (issue 44): the one rule (``burst.recovery.back_to_spot``) term by term, the
requeue after a move, the budgets a move does not spend, and the simulator's fallback mode
(``burst.plan.fallback``) deciding with the very same function (pure: no process)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst import recovery
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.errors import BadInputError
from burst.plan.fallback import FallbackParams, move_inputs, simulate_fallback
from burst.recovery import (
    BACK_TO_SPOT,
    MoveInputs,
    RecoveryBudgetSpent,
    Spent,
    back_to_spot,
    check_budgets,
    strategy_for,
)
from burst.spec import BurstJob, load_spec

#: an on-demand fallback at $40/h, spot at $12/h: 20 h of training left
BASE = MoveInputs(
    on_demand_usd_per_hour=40.0,
    spot_usd_per_hour=12.0,
    spot_mtbf_hours=10.0,
    remaining_hours=20.0,
    save_s=60.0,
    provision_s=360.0,
    pull_s=300.0,
    restore_s=90.0,
    checkpoint_gb=50.0,
    egress_usd_per_gb=0.0,
    checkpoint_interval_s=1200.0,
    restart_s=None,
    margin=0.1,
)


def _terms(m: MoveInputs) -> dict[str, float]:
    return {t.term: t.usd for t in back_to_spot(m).terms}


def test_each_term_is_priced_and_named() -> None:
    d = back_to_spot(BASE)
    t = _terms(BASE)
    assert t["stay_on_demand"] == pytest.approx(40.0 * 20)
    assert t["spot_compute"] == pytest.approx(12.0 * 20)
    # each pre-emption loses 600 s (half an interval) + 750 s (provision+pull+restore): a
    # share f = 1350 s / 10 h of spot time, so 20 h of work take 20 / (1 - f) h on spot
    f = 1350 / 3600 / 10.0
    assert t["spot_lost_work"] == pytest.approx(12.0 * (20 / (1 - f) - 20))
    for term, seconds in (("save", 60), ("provision", 360), ("image_pull", 300), ("restore", 90)):
        assert t[term] == pytest.approx(40.0 * seconds / 3600), term  # at the on-demand rate
    assert t["egress"] == 0.0
    assert t["margin"] == pytest.approx(0.1 * 800)
    assert d.saving_usd == pytest.approx(
        t["stay_on_demand"] - t["spot_compute"] - t["spot_lost_work"]
    )
    assert d.cost_usd == pytest.approx(
        sum(t[k] for k in ("save", "provision", "image_pull", "restore"))
    )
    assert d.move and d.reason.startswith("move to spot")
    doc = d.as_dict()
    assert doc["decision"] == "move"
    assert [x["term"] for x in doc["terms"]] == list(t)
    assert all(x["detail"] for x in doc["terms"])


def test_stays_when_there_is_too_little_left_or_no_capacity() -> None:
    short = back_to_spot(dataclasses.replace(BASE, remaining_hours=0.3))
    assert not short.move and short.reason.startswith("stay on demand")
    none = back_to_spot(dataclasses.replace(BASE, spot_available=False))
    assert not none.move and "no spot capacity" in none.reason


def test_spots_lost_work_is_in_its_predicted_cost() -> None:
    """A spot price alone would move; with an MTBF of 30 min its expected restarts eat the
    saving, and the rule stays; with one of 15 min (less than a loss costs) spot would never
    finish."""
    flaky = dataclasses.replace(BASE, spot_mtbf_hours=0.5)
    d = back_to_spot(flaky)
    assert d.cost_usd + d.margin_usd < (40.0 - 12.0) * 20  # the price alone says move
    assert not d.move and d.saving_usd < 0
    assert _terms(flaky)["spot_lost_work"] == pytest.approx(12.0 * (20 / 0.25 - 20))
    never = back_to_spot(dataclasses.replace(BASE, spot_mtbf_hours=0.25))
    assert not never.move and "never finish" in never.reason
    assert never.as_dict()["terms"][2] == {
        "term": "spot_lost_work",
        "usd": None,
        "detail": never.terms[2].detail,
    }


def test_egress_flips_the_decision() -> None:
    """The same move, to a spot candidate in another region: 2 TB of checkpoint at
    $0.09/GB costs more than the saving leaves."""
    near = dataclasses.replace(BASE, remaining_hours=3.0, checkpoint_gb=2000.0)
    far = dataclasses.replace(near, egress_usd_per_gb=0.09)
    assert back_to_spot(near).move
    d = back_to_spot(far)
    assert not d.move and "egress $180.00" in d.reason
    assert _terms(far)["egress"] == pytest.approx(180.0)


def test_the_margin_is_a_share_of_staying() -> None:
    tight = dataclasses.replace(BASE, remaining_hours=1.0)
    assert back_to_spot(dataclasses.replace(tight, margin=0.0)).move
    assert not back_to_spot(dataclasses.replace(tight, margin=0.9)).move


@pytest.mark.parametrize(
    "bad", [{"spot_mtbf_hours": 0.0}, {"save_s": -1.0}, {"margin": float("nan")}]
)
def test_bad_inputs_are_refused_in_one_line(bad: dict[str, Any]) -> None:
    with pytest.raises(BadInputError, match="back to spot: "):
        back_to_spot(dataclasses.replace(BASE, **bad))


# --------------------------------------------------------------------------- requeue, budgets


def _job(quickstart_in: Path, **rec: Any) -> BurstJob:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["compute"]["recovery"] = rec
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_spec(quickstart_in)


def _c(region: str, capacity: str = "spot") -> Candidate:
    return Candidate.model_validate({"region": region, "provider": "aws", "capacity": capacity})


A, B = "ap-southeast-1", "ap-southeast-3"
PLAN = [_c(A), _c(B), _c(A, "on_demand"), _c(B, "on_demand")]


def test_the_requeue_after_a_move_puts_spot_first(quickstart_in: Path) -> None:
    job = _job(quickstart_in, preemptions_per_region=0, on_demand_after=1, max_placements=8)
    s = strategy_for(job)
    p = s.place(PLAN, None, "start")
    spot_a = s.placed(p, p.candidates[0], PLAN)  # A spot, then lost:
    p = s.place(PLAN, spot_a, "requeue")
    assert [c.capacity for c in p.candidates][:2] == ["on_demand", "on_demand"]
    on_demand = s.placed(p, p.candidates[0], PLAN)
    assert on_demand.spot_losses == 1 and on_demand.may_requeue
    # lost on demand (hardware): still on demand first
    lost = s.place(PLAN, on_demand, "requeue")
    assert lost.candidates[0].capacity == "on_demand" and not lost.record.back_to_spot
    # moved back to spot: spot first, A's spot again (its capacity came back), losses afresh
    moved = s.place(PLAN, on_demand, "requeue", last_source=BACK_TO_SPOT)
    assert on_demand.candidate is not None and on_demand.candidate.region == B
    assert [(c.region, c.capacity) for c in moved.candidates] == [
        (A, "spot"),
        (B, "spot"),
        (A, "on_demand"),  # should spot have no capacity after all: never B's just left
    ]
    assert moved.record.back_to_spot and moved.record.spot_losses == 0
    landed = s.placed(moved, moved.candidates[0], PLAN)
    assert landed.back_to_spot and landed.may_requeue
    # the next loss on that spot placement: the usual order, on demand first again
    again = s.place(PLAN, landed, "requeue")
    assert not again.record.back_to_spot and again.record.spot_losses == 1
    assert again.candidates[0].capacity == "on_demand"


def test_a_move_from_spot_is_no_move(quickstart_in: Path) -> None:
    """``back_to_spot`` recorded on a spot placement (not a fallback) changes nothing."""
    job = _job(quickstart_in, preemptions_per_region=0, on_demand_after=5)
    s = strategy_for(job)
    p = s.place(PLAN, None, "start")
    spot_a = s.placed(p, p.candidates[0], PLAN)
    p = s.place(PLAN, spot_a, "requeue", last_source=BACK_TO_SPOT)
    assert not p.record.back_to_spot and p.record.spot_losses == 1


def test_a_move_spends_no_recovery_budget(quickstart_in: Path) -> None:
    job = _job(quickstart_in, max_preemptions=0, max_failures=0)
    settings = job.compute.recovery
    assert BACK_TO_SPOT in recovery.SOURCES
    assert Spent.of([BACK_TO_SPOT] * 5) == Spent()
    assert check_budgets(settings, [BACK_TO_SPOT, BACK_TO_SPOT]) == Spent()
    with pytest.raises(RecoveryBudgetSpent):
        check_budgets(settings, [BACK_TO_SPOT, recovery.PREEMPTION])
    from burst.attempt_records import recoveries

    moved = TrainAttempt(attempt=1, outcome="moved", recovery_source=BACK_TO_SPOT)
    assert recoveries([moved]) == [
        {
            "attempt": 1,
            "outcome": "moved",
            "recovery_source": BACK_TO_SPOT,
            "budget": None,
            "ended_at_step": None,
        }
    ]


# --------------------------------------------------------------------------- the simulator

H = 3600.0
SIM = FallbackParams(
    work_s=200 * H,
    spot_mtbf_s=25 * H,
    interval_s=600.0,
    on_demand_usd_per_hour=40.0,
    spot_usd_per_hour=12.0,
    restart_s=300.0,
    on_demand_after=1,
    probe_interval_s=1800.0,
    save_s=30.0,
    provision_s=300.0,
    pull_s=120.0,
    restore_s=60.0,
    # a spot-availability trace: capacity gone for 6 h twice
    availability=((0.0, 50 * H), (56 * H, 120 * H), (126 * H, 1e9)),
)


def test_on_a_spot_availability_trace_most_hours_are_on_spot() -> None:
    """The issue's bar: at least 90 % of GPU-hours on spot, at most 1 point more lost work
    than staying on demand after the first fallback."""
    moving = simulate_fallback(SIM, seed=3)
    staying = simulate_fallback(dataclasses.replace(SIM, probe_interval_s=None), seed=3)
    assert moving.finished and staying.finished
    assert staying.moves == 0 and staying.spot_share < 0.5
    assert moving.moves >= 2 and moving.spot_share >= 0.9
    assert moving.lost_share <= staying.lost_share + 0.01
    assert moving.usd < staying.usd
    assert all(r.startswith("move to spot") for r in moving.move_reasons)
    assert simulate_fallback(SIM, seed=3) == moving  # seeded


def test_the_simulator_and_the_runtime_decide_with_the_one_rule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Both call ``burst.recovery.back_to_spot``: patched to stay, neither moves; the same
    inputs give the same decision."""
    from burst.train.spot_probe import SpotMover

    mover = _mover(tmp_path)
    seen: list[str] = []
    real = recovery.back_to_spot

    def stay(m: MoveInputs) -> recovery.MoveDecision:
        seen.append("called")
        return dataclasses.replace(real(m), move=False, reason="stay: patched")

    monkeypatch.setattr(recovery, "back_to_spot", stay)
    sim = simulate_fallback(SIM, seed=3)
    assert sim.moves == 0 and sim.probes > 0
    n = len(seen)
    got = mover.check(remaining_s=100 * H, save_s=30.0, restore_s=60.0, checkpoint_bytes=10**9)
    assert got is not None and got["decision"] == "stay" and got["reason"] == "stay: patched"
    assert len(seen) == n + 1
    monkeypatch.setattr(recovery, "back_to_spot", real)
    # the same inputs, built by each side, give the same decision
    runtime = mover.inputs(mover.spot_candidates()[0], True, 100 * H, 30.0, 60.0, 0)
    sim_side = move_inputs(
        dataclasses.replace(
            SIM,
            on_demand_usd_per_hour=runtime.on_demand_usd_per_hour,
            spot_usd_per_hour=runtime.spot_usd_per_hour,
            spot_mtbf_s=runtime.spot_mtbf_hours * H,
            interval_s=runtime.checkpoint_interval_s,
            save_s=runtime.save_s,
            provision_s=runtime.provision_s,
            pull_s=runtime.pull_s,
            restore_s=runtime.restore_s,
            restart_s=runtime.restart(),
            margin=runtime.margin,
        ),
        100 * H,
        True,
    )
    a, b = back_to_spot(runtime), back_to_spot(sim_side)
    assert (a.move, round(a.saving_usd, 6), round(a.cost_usd, 6)) == (
        b.move,
        round(b.saving_usd, 6),
        round(b.cost_usd, 6),
    )
    assert SpotMover is type(mover)


def _mover(tmp_path: Path, **rec: Any) -> Any:
    from burst.train.spot_probe import LocalProbe, SpotMover
    from tests.recovery.fallback_docs import fallback_docs

    job, plan, infra = fallback_docs(tmp_path, **rec)
    mover = SpotMover.for_attempt(job, plan, infra, tmp_path, LocalProbe(tmp_path))
    assert mover is not None
    return mover


def test_a_quota_taken_requeues_into_the_same_placement_first(quickstart_in: Path) -> None:
    """Kueue evicted the run (its quota went to a higher-priority run, exit 76): the capacity
    is still there, so the requeue waits for the same placement first (then the usual
    order), spends the preemption budget, counts no spot loss, and may wait again even
    with no other candidate."""
    job = _job(quickstart_in, preemptions_per_region=0, on_demand_after=1, max_placements=8)
    s = strategy_for(job)
    only = PLAN[:1]
    p = s.place(only, None, "start")
    placed = s.placed(p, p.candidates[0], only)
    assert not placed.may_requeue and placed.may_wait_again  # one candidate: waits again
    again = s.place(only, placed, "requeue", last_source=recovery.QUOTA)
    assert [(c.region, c.capacity) for c in again.candidates] == [(A, "spot")]
    assert again.record.spot_losses == 0 and again.record.requeues == 1
    p = s.place(PLAN, None, "start")
    spot_a = s.placed(p, p.candidates[0], PLAN)
    again = s.place(PLAN, spot_a, "requeue", last_source=recovery.QUOTA)
    assert (again.candidates[0].region, again.candidates[0].capacity) == (A, "spot")
    assert recovery.notice_source(recovery.QUOTA_NOTICE) == recovery.QUOTA
    assert Spent.of([recovery.QUOTA]).preemptions == 1
