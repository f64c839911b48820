"""Preflight record -> plan, end to end with the shipped policies and catalog (issue 6: "data
that may not leave a country never moves"). The record's ``data_may_leave`` and each
decision's ``data_may_move`` are written by the Rego rules and read by placement."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.policy import evaluate, load_policies

from .conftest import make_spec, write_spec

TODAY = dt.date(2026, 11, 21)
REPO = Path(__file__).resolve().parents[2]

# UAE health data (Health ICT law: localisation, deny) stored in AWS me-central-1; candidates
# in the UAE (AWS me-central-1, Azure uaenorth) and Singapore.
UAE_HEALTH = {
    "organization.headquarters": "AE",
    "data.origin": "AE",
    "data.classification": "health",
    "data.region": "me-central-1",
    "compute.regions": ["me-central-1", "uaenorth", "ap-southeast-1"],
    "compute.providers": ["aws", "azure"],
}
# Qatari government data: its localisation fact is low confidence, so leaving is `review`,
# not `deny`; the data must still not move.
QA_GOV = {
    "organization.headquarters": "QA",
    "data.origin": "QA",
    "data.classification": "government",
    "data.region": "me-central1",
    "compute.regions": ["me-central1", "asia-southeast1"],
    "compute.providers": ["gcp"],
}


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalog(use_env=False)


def _moves(record: dict[str, Any]) -> dict[tuple[str, str], tuple[str, bool]]:
    return {
        (d["provider"], d["region"]): (d["verdict"], d["data_may_move"])
        for d in record["decisions"]
    }


def test_uae_health_record_says_the_data_stays_in_the_uae() -> None:
    record = evaluate(make_spec(**UAE_HEALTH), load_policies(), today=TODAY).to_json()
    assert record["data_may_leave"] is False
    [duty] = record["data_localisation"]
    assert duty["fact"] == "jurisdictions.AE.localization.health-ict-law"
    assert duty["stay_in"] == ["AE"] and duty["effect"] == "deny"
    moves = _moves(record)
    # leaving the UAE: denied, may not move; inside the UAE: not denied, may move
    assert moves[("aws", "ap-southeast-1")] == ("deny", False)
    assert moves[("aws", "me-central-1")][1] is True
    assert moves[("azure", "uaenorth")] == ("review", True)


def test_uae_health_plan_never_moves_the_data_out(cat) -> None:  # type: ignore[no-untyped-def]
    job = make_spec(**UAE_HEALTH)
    doc = plan(job, cat, evaluate(job, load_policies(), today=TODAY).to_json())
    where = {(c["provider"], c["region"]): c for c in doc["candidates"]}
    assert set(where) == {("aws", "me-central-1"), ("azure", "uaenorth")}
    assert where[("aws", "me-central-1")]["data_strategy"] == "compute_to_data"
    assert where[("aws", "me-central-1")]["egress_usd"] == 0
    # moving inside the country is allowed by the policy and priced
    assert where[("azure", "uaenorth")]["data_strategy"] == "data_to_compute"
    assert where[("azure", "uaenorth")]["egress_usd"] > 0
    assert any(e["region"] == "ap-southeast-1" and e["provider"] == "aws" for e in doc["excluded"])


def test_review_candidate_the_data_may_not_reach_is_not_planned(cat) -> None:  # type: ignore[no-untyped-def]
    """A candidate that is only `review` (not denied) but whose residency fact is unsure
    (Qatar's "no general localisation" is low confidence): the planner keeps it out because
    data_may_move is false, not because of a deny."""
    job = make_spec(**QA_GOV)
    record = evaluate(job, load_policies(), today=TODAY).to_json()
    assert record["data_may_leave"] is False
    assert _moves(record)[("gcp", "asia-southeast1")] == ("review", False)
    assert _moves(record)[("gcp", "me-central1")] == ("review", True)
    doc = plan(job, cat, record)
    assert {c["region"] for c in doc["candidates"]} == {"me-central1"}
    [out] = [e for e in doc["excluded"] if e["region"] == "asia-southeast1"]
    assert "may not leave" in out["reason"]
    # the same record with the flags removed would have planned the move: the flags decide
    for d in record["decisions"]:
        del d["data_may_move"]
    del record["data_may_leave"]
    unflagged = plan(job, cat, record)
    assert "asia-southeast1" in {c["region"] for c in unflagged["candidates"]}


def test_personal_data_that_may_leave_moves(cat) -> None:  # type: ignore[no-untyped-def]
    """SG personal data with a safeguard: no localisation, so the data may leave."""
    job = make_spec(
        **{
            "data.classification": "personal",
            "data.transfer_safeguards": ["contract"],
            "compute.regions": ["ap-southeast-1", "ap-southeast-3"],
        }
    )
    record = evaluate(job, load_policies(), today=TODAY).to_json()
    assert record["data_may_leave"] is True and record["data_localisation"] == []
    assert all(d["data_may_move"] for d in record["decisions"])
    doc = plan(job, cat, record)
    assert "ap-southeast-3" in {c["region"] for c in doc["candidates"]}


@pytest.mark.e2e
def test_cli_preflight_record_feeds_cli_plan(burst_cmd: list[str], tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "uae.yaml", **UAE_HEALTH)
    rec = tmp_path / "decision.json"
    pre = subprocess.run(
        [*burst_cmd, "preflight", str(spec), "--today", "2026-11-21", "--out", str(rec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert pre.returncode == 3, pre.stderr  # nothing is allowed (review at best)
    assert json.loads(rec.read_text())["data_may_leave"] is False
    proc = subprocess.run(
        [*burst_cmd, "plan", str(spec), "--decision", str(rec), "--json", "--replicas", "4"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {c["region"] for c in doc["candidates"]} == {"me-central-1", "uaenorth"}
    assert all(c["region"] != "ap-southeast-1" for c in doc["candidates"])


def test_flags_that_are_not_booleans_are_bad_input(cat) -> None:  # type: ignore[no-untyped-def]
    from burst.errors import BadInputError

    job = make_spec()
    bad = {
        "spec_sha256": job.sha256(),
        "policy_sha256": "0" * 64,  # built by hand: policies not checked here
        "decisions": [{"region": "ap-southeast-3", "provider": "aws", "verdict": "allow"}],
    }
    bad["decisions"][0]["data_may_move"] = "no"
    with pytest.raises(BadInputError, match="data_may_move: must be true or false"):
        plan(job, cat, bad)
    del bad["decisions"][0]["data_may_move"]
    bad["data_may_leave"] = "no"
    with pytest.raises(BadInputError, match="data_may_leave: must be true or false"):
        plan(job, cat, bad)
