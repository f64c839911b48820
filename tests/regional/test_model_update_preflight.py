"""Issue 21, legal preflight: a regional-sync worker's model updates cross to the aggregation
region as a transfer kind of their own (rule XFER-MODEL-UPDATE, policies/rules/model_update.rego),
and an unknown fact about them reviews, never allows. The decision cases in
policies/tests/preflight.yaml (``burst policy test -k regional``) cover the rule's branches;
these tests run the shipped policies through the engine with the input the preflight builds."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from burst.documents import parse_document
from burst.policy.engine import Engine, input_document, training_input
from burst.policy.loader import PolicySet, load_policies
from burst.policy.models import ModelUpdateFact
from burst.policy.record import evaluate
from burst.spec import BurstJob, parse_spec

REPO = Path(__file__).resolve().parents[2]
TODAY = dt.date(2026, 11, 23)
SG, ID = "ap-southeast-1", "ap-southeast-3"


@pytest.fixture(scope="module")
def shipped() -> PolicySet:
    return load_policies(REPO / "policies")


@pytest.fixture(scope="module")
def engine(shipped: PolicySet) -> Engine:
    return Engine(shipped)


def job(classification: str = "personal") -> BurstJob:
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["data"].update(
        classification=classification,
        region=None,
        size_gb=2.0,
        shards={SG: 1.0, ID: 1.0},
        transfer_safeguards=["contract"],
    )
    doc["compute"]["regions"] = [SG, ID]
    return parse_spec(yaml.safe_dump(doc), "test spec")


def regional_input(j: BurstJob, region: str, aggregation: str = SG) -> dict[str, Any]:
    doc = input_document(j, region, "aws", today=TODAY, max_fact_age_days=365)
    doc["spec"]["training"] = {
        "strategy": "regional-sync",
        "regional_sync": {"regions": [SG, ID], "aggregation_region": aggregation},
    }
    return doc


def rules(decision: dict[str, Any]) -> set[str]:
    return {r["rule"] for r in decision["reasons"] if r["effect"] != "info"}


def test_shipped_model_update_facts_are_unknown(shipped: PolicySet) -> None:
    """The fact sheet says nothing about model updates: the shipped facts must not claim more."""
    facts = shipped.data_document()["facts"]["model_updates"]
    assert set(facts) == {"personal", "localisation", "export_controlled", "important_data"}
    for name, fact in facts.items():
        assert fact["confidence"] == "unknown", name
        assert "covered" not in fact, name  # null: nobody knows
        assert fact["source"], name


def test_unknown_answer_must_say_unknown() -> None:
    with pytest.raises(ValidationError, match="confidence must be 'unknown'"):
        ModelUpdateFact(rule="r", confidence="high", last_verified=TODAY)  # type: ignore[arg-type]
    ok = ModelUpdateFact(rule="r", confidence="high", last_verified=TODAY, covered=False)  # type: ignore[arg-type]
    assert ok.covered is False


def test_single_region_spec_carries_no_regional_input() -> None:
    assert training_input(job()) == {"strategy": "single-region", "regional_sync": None}


def test_personal_updates_with_unknown_fact_review(engine: Engine) -> None:
    worker = engine.evaluate(regional_input(job(), ID))
    assert worker["verdict"] == "review"
    update = [r for r in worker["reasons"] if r["rule"] == "XFER-MODEL-UPDATE"]
    assert [r["fact"] for r in update] == ["model_updates.personal"]
    assert update[0]["effect"] == "review"
    assert "ap-southeast-3 (ID)" in update[0]["message"]
    assert "ap-southeast-1 (SG)" in update[0]["message"]
    assert "unknown" in update[0]["message"]


def test_the_aggregator_sends_no_update_and_reads_only_its_shard(engine: Engine) -> None:
    """The aggregation region's worker: no XFER-MODEL-UPDATE, and the Indonesian shard is not
    pulled into Singapore (without regional-sync the same spec moves it: a transfer out of ID)."""
    j = job()
    agg = engine.evaluate(regional_input(j, SG))
    assert "XFER-MODEL-UPDATE" not in rules(agg)
    assert [(s["region"], s["moves"]) for s in agg["sources"]] == [(SG, False)]
    plain = engine.evaluate(input_document(j, SG, "aws", today=TODAY, max_fact_age_days=365))
    assert (ID, True) in [(s["region"], s["moves"]) for s in plain["sources"]]


def test_public_updates_pass_with_an_audit_entry(engine: Engine) -> None:
    worker = engine.evaluate(regional_input(job("public"), ID))
    assert "XFER-MODEL-UPDATE" not in rules(worker)
    sat = [s for s in worker["satisfied"] if s["rule"] == "XFER-MODEL-UPDATE"]
    assert len(sat) == 1 and "public data" in sat[0]["message"]


def test_unknown_aggregation_region_reviews(engine: Engine) -> None:
    worker = engine.evaluate(regional_input(job("public"), ID, aggregation="xx-nowhere-9"))
    assert worker["verdict"] == "review"
    assert any(
        r["rule"] == "XFER-MODEL-UPDATE" and r["fact"] == "regions.xx-nowhere-9"
        for r in worker["reasons"]
    )


def test_missing_facts_review_too(shipped: PolicySet) -> None:
    """Fail closed: a policy directory without the model_updates facts reviews such updates."""
    doc = shipped.data_document()
    doc["facts"]["model_updates"] = {}
    worker = Engine(shipped, data=doc).evaluate(regional_input(job(), ID))
    assert "XFER-MODEL-UPDATE" in rules(worker)
    assert worker["verdict"] == "review"


def regional_job(classification: str) -> BurstJob:
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["data"].update(
        classification=classification,
        region=None,
        size_gb=2.0,
        shards={SG: 1.0, ID: 1.0},
        transfer_safeguards=["contract"],
    )
    doc["compute"]["regions"] = [SG, ID]
    doc["training"].update(strategy="regional-sync", regional_sync={"aggregation_region": SG})
    return parse_spec(yaml.safe_dump(doc), "test spec")


def test_a_regional_sync_spec_with_an_unknown_fact_is_review(shipped: PolicySet) -> None:
    """The whole preflight (burst.policy.record.evaluate) on a regional-sync spec: the spec's
    own fields reach the rules, and the Indonesian worker's personal-data updates review."""
    from burst.documents import DecisionRecord

    j = regional_job("personal")
    assert training_input(j)["regional_sync"] == {"regions": [SG, ID], "aggregation_region": SG}
    record = evaluate(j, shipped, today=TODAY).to_json()
    parse_document(DecisionRecord, record, "record")
    worker = next(d for d in record["decisions"] if d["region"] == ID)
    assert worker["verdict"] == "review"
    assert any(
        r["rule"] == "XFER-MODEL-UPDATE" and r["fact"] == "model_updates.personal"
        for r in worker["reasons"]
    )
    aggregator = next(d for d in record["decisions"] if d["region"] == SG)
    assert not any(r["rule"] == "XFER-MODEL-UPDATE" for r in aggregator["reasons"])
    public = evaluate(regional_job("public"), shipped, today=TODAY).to_json()
    worker = next(d for d in public["decisions"] if d["region"] == ID)
    assert any(s["rule"] == "XFER-MODEL-UPDATE" for s in worker["satisfied"])
    assert not any(r["rule"] == "XFER-MODEL-UPDATE" for r in worker["reasons"])
