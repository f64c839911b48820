"""Back to spot at run time (``burst.train.spot_probe``): the probes (local fault point; EC2's
spot placement scores against a stub client, named so), when an attempt probes, a probe that
fails never stopping training, and one real train attempt on an on-demand fallback that
moves back to spot at a checkpoint boundary and the attempt after it that resumes there."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path
from typing import Any

import pytest

from burst import recovery
from burst.documents import TrainDocument
from burst.documents.plan import Candidate
from burst.documents.provision import TerraformInfo
from burst.documents.train import TrainAttempt
from burst.errors import Preempted
from burst.faults import SPOT_CAPACITY_FILE, spot_capacity
from burst.settings import Settings
from burst.train.spot_probe import (
    AwsSpotPlacementProbe,
    LocalProbe,
    SpotMover,
    probe_for,
)
from tests.recovery.fallback_docs import A, B, candidate, fallback_docs


def test_the_local_probe_reads_the_fault_point(tmp_path: Path) -> None:
    cands = [candidate(A, "spot", 1.0), candidate(B, "spot", 1.0)]
    settings = Settings.from_env({"BURST_SIMULATE_NO_CAPACITY": A})
    assert spot_capacity(tmp_path, settings) == {A: 0.0}  # what the local node group emulates
    (tmp_path / SPOT_CAPACITY_FILE).write_text(json.dumps({A: 9, B: 2}))
    assert LocalProbe(tmp_path).scores(cands) == [9.0, 2.0]
    (tmp_path / SPOT_CAPACITY_FILE).write_text('{"a": true}')
    with pytest.raises(Exception, match="region: score"):
        LocalProbe(tmp_path).scores(cands)


class StubEc2:
    """A stub of boto3's EC2 client (only GetSpotPlacementScores): nothing real can answer
    it here."""

    def __init__(self, scores: list[dict[str, Any]] | Exception) -> None:
        self.answer = scores
        self.calls: list[dict[str, Any]] = []

    def get_spot_placement_scores(self, **kw: Any) -> dict[str, Any]:
        self.calls.append(kw)
        if isinstance(self.answer, Exception):
            raise self.answer
        return {"SpotPlacementScores": self.answer}


def test_the_aws_probe_asks_for_placement_scores_stub(tmp_path: Path) -> None:
    ec2 = StubEc2(
        [
            {"Region": A, "AvailabilityZoneId": "apse1-az1", "Score": 3},
            {"Region": A, "AvailabilityZoneId": "apse1-az2", "Score": 8},
            {"Region": B, "AvailabilityZoneId": "apse3-az1", "Score": 2},
        ]
    )
    made: list[tuple[str, str | None]] = []

    def client(service: str, region: str | None) -> StubEc2:
        made.append((service, region))
        return ec2

    gcp = Candidate.model_validate({"region": "asia-southeast1", "provider": "gcp"})
    probe = AwsSpotPlacementProbe(A, client)
    got = probe.scores([candidate(A, "spot", 1.0), candidate(B, "spot", 1.0), gcp])
    assert got == [8.0, 2.0, None]  # a region's best zone; another provider: not known
    assert made == [("ec2", A)]
    assert ec2.calls == [
        {
            "InstanceTypes": ["p5.48xlarge"],
            "TargetCapacity": 1,
            "TargetCapacityUnitType": "units",
            "SingleAvailabilityZone": True,
            "RegionNames": [A, B],
        }
    ]


def test_which_probe_and_which_attempts_probe(tmp_path: Path) -> None:
    job, plan, infra = fallback_docs(tmp_path)
    assert isinstance(probe_for(infra, tmp_path), LocalProbe)  # no Terraform record: local
    stack = TerraformInfo(kind="aws", workdir="w", config_dir="c", state="s")
    aws = infra.model_copy(update={"terraform": stack})
    assert isinstance(probe_for(aws, tmp_path), AwsSpotPlacementProbe)
    assert SpotMover.for_attempt(job, plan, infra, tmp_path) is not None
    rec = infra.recovery
    assert rec is not None
    off, _, _ = fallback_docs(tmp_path / "off", probe_interval_s=None)
    spot_here = infra.model_copy(update={"candidate": candidate(A, "spot", 30.0)})
    first = infra.model_copy(update={"recovery": rec.model_copy(update={"spot_losses": 0})})
    last = infra.model_copy(update={"recovery": rec.model_copy(update={"may_requeue": False})})
    no_spot = plan.model_copy(
        update={"candidates": [c for c in plan.candidates if c.capacity != "spot"]}
    )
    assert SpotMover.for_attempt(off, plan, infra, tmp_path) is None  # default: off
    assert SpotMover.for_attempt(job, plan, spot_here, tmp_path) is None
    assert SpotMover.for_attempt(job, plan, first, tmp_path) is None  # on demand, no fallback
    assert SpotMover.for_attempt(job, plan, last, tmp_path) is None  # a move would give up
    assert SpotMover.for_attempt(job, no_spot, infra, tmp_path) is None
    assert SpotMover.for_attempt(job, None, infra, tmp_path) is None
    # the move retried in place (exit 75), or a requeue that found no spot: no second move
    moved = TrainAttempt(attempt=1, outcome="moved", recovery_source=recovery.BACK_TO_SPOT)
    assert SpotMover.for_attempt(job, plan, infra, tmp_path, past=[moved]) is None
    lost = TrainAttempt(attempt=1, outcome="preempted", recovery_source=recovery.PREEMPTION)
    assert SpotMover.for_attempt(job, plan, infra, tmp_path, past=[moved, lost]) is not None


def test_probes_every_interval_and_a_failed_probe_stays(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    job, plan, infra = fallback_docs(tmp_path)
    now = [1000.0]
    probe = AwsSpotPlacementProbe(A, lambda s, r: StubEc2(RuntimeError("throttled")))
    mover = SpotMover.for_attempt(job, plan, infra, tmp_path, probe)
    assert mover is not None
    mover.clock = lambda: now[0]
    with caplog.at_level(logging.WARNING, logger="burst.train.spot_probe"):
        assert mover.check(36000.0, 30.0, 60.0, 10**9) is None  # the first boundary: probed
    assert mover.probes == 1 and mover.errors == ["RuntimeError: throttled"]
    assert "probe failed (RuntimeError: throttled): staying on demand" in caplog.text
    now[0] += 599.0
    assert mover.check(36000.0, 30.0, 60.0, 10**9) is None and mover.probes == 1  # not due
    now[0] += 1.0
    mover.probe = LocalProbe(tmp_path)
    got = mover.check(36000.0, 30.0, 60.0, 10**9)
    assert mover.probes == 2 and got is not None and got["decision"] == "move"


def test_a_spot_candidate_in_another_region_pays_egress(tmp_path: Path) -> None:
    """A has no spot capacity, B has: the move to B's spot carries the checkpoint across
    regions at the catalog's inter-region price."""
    job, plan, infra = fallback_docs(tmp_path)
    (tmp_path / SPOT_CAPACITY_FILE).write_text(json.dumps({A: 1, B: 9}))
    mover = SpotMover.for_attempt(job, plan, infra, tmp_path)
    assert mover is not None
    got = mover.check(10 * 3600.0, 30.0, 60.0, 500 * 10**9)
    assert got is not None and got["candidate"]["region"] == B
    terms = {t["term"]: t for t in got["terms"]}
    assert terms["egress"]["usd"] > 0 and "500 GB" in terms["egress"]["detail"]
    assert terms["provision"]["detail"].startswith("240 s")  # measured by provision


# --------------------------------------------------------------------------- a real attempt


def _rule_for_hours(monkeypatch: pytest.MonkeyPatch, hours: float) -> list[recovery.MoveInputs]:
    """The quickstart trains for a second; the rule sees ``hours`` left instead (every other
    input as the attempt built it), so that a move can pay for itself."""
    seen: list[recovery.MoveInputs] = []
    real = recovery.back_to_spot

    def rule(m: recovery.MoveInputs) -> recovery.MoveDecision:
        seen.append(m)
        return real(dataclasses.replace(m, remaining_hours=hours))

    monkeypatch.setattr(recovery, "back_to_spot", rule)
    return seen


def test_an_attempt_on_a_fallback_moves_back_to_spot_at_a_boundary(
    tmp_path: Path, runs_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from burst.attempt_records import read_store, sources
    from burst.train.checkpoints import RunCheckpoints
    from burst.train.loop import TrainRun

    # no recovery budget at all: the move must spend none of it
    job, plan, infra = fallback_docs(tmp_path, max_preemptions=0, max_failures=0)
    run_dir = runs_root / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / SPOT_CAPACITY_FILE).write_text(json.dumps({A: 10, B: 10}))
    seen = _rule_for_hours(monkeypatch, 50.0)
    with pytest.raises(Preempted) as stop:
        TrainRun(job, "r1", run_dir, plan, infra).run()
    assert stop.value.exit_code == 76  # EXIT_MOVED: requeued, not retried in place
    assert "back to spot at step 5" in stop.value.message
    moved_doc = stop.value.doc
    assert isinstance(moved_doc, TrainDocument)
    [rec] = moved_doc.attempts
    assert rec.outcome == "moved" and rec.recovery_source == recovery.BACK_TO_SPOT
    assert rec.ended_at_step == 5 and rec.notice is not None
    assert rec.notice.source == "back-to-spot"
    why = rec.back_to_spot
    assert why is not None
    d = why.model_dump()
    assert d["decision"] == "move" and d["reason"].startswith("move to aws/ap-southeast-1 spot")
    assert d["candidate"] == {"region": A, "provider": "aws", "capacity": "spot"}
    assert [t["term"] for t in d["terms"]][:3] == [
        "stay_on_demand",
        "spot_compute",
        "spot_lost_work",
    ]
    assert d["probe"] == "local" and d["at_step"] == 5
    assert len(seen) == 1 and seen[0].on_demand_usd_per_hour == 98.0
    assert seen[0].spot_usd_per_hour == 30.0 and seen[0].egress_usd_per_gb == 0.0
    # the full checkpoint of step 5 committed before the exit
    store = RunCheckpoints(job, "r1")
    try:
        latest = store.latest("full")
        assert latest is not None and latest.step == 5
        records = read_store(store.mgr.store)
    finally:
        store.close()
    assert sources(records) == [recovery.BACK_TO_SPOT]

    # the requeue: spot first, and the attempt there resumes at step 5 with both budgets whole
    s = recovery.strategy_for(job)
    assert infra.recovery is not None
    placement = s.place(plan.candidates, infra.recovery, "requeue", last_source=rec.recovery_source)
    assert placement.candidates[0].capacity == "spot" and placement.record.back_to_spot
    landed = s.placed(placement, placement.candidates[0], plan.candidates)
    on_spot = infra.model_copy(update={"candidate": placement.candidates[0], "recovery": landed})
    doc = TrainRun(job, "r1", run_dir, plan, on_spot).run()
    assert doc.resumed_from == 5 and doc.final_step == job.training.steps
    assert len(seen) == 1  # on spot: no probing
