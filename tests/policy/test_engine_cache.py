"""The compiled policy engine is shared within a process (burst.policy.engine.Engine.shared),
keyed by the content that goes into the interpreter: the same policies give the same compiled
engine, an edited rule or fact gives a new one (never a stale decision)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from policy_helpers import QUICKSTART

from burst.policy import evaluate, load_policies
from burst.policy.engine import Engine, input_document
from burst.spec import load_spec

EXTRA_RULE = """package burst.preflight

reasons contains reason("TEST-EDITED", "deny", "denied by an edited rule", {}, "test.edited") if {
	cand.region == "%s"
}
"""


def _verdicts(record: dict[str, Any]) -> dict[str, str]:
    return {d["region"]: d["verdict"] for d in record["decisions"]}


def test_same_content_same_engine_edited_content_new_engine(
    policy_copy: Path, edit_yaml: Callable[[Path, Callable[[Any], None]], None]
) -> None:
    job = load_spec(QUICKSTART)
    first = load_policies(policy_copy)
    engine = Engine.shared(first)
    assert Engine.shared(load_policies(policy_copy)) is engine  # reloaded, same content
    before = evaluate(job, first).to_json()
    assert before["verdict"] == "allow"
    # the shared engine decides as a freshly built one does
    doc = input_document(
        job, job.compute.regions[0], "aws", today=dt.date(2026, 11, 24), max_fact_age_days=365
    )
    assert engine.evaluate(doc) == Engine(first).evaluate(doc)

    # an edited rule: the next load compiles it and the decision changes
    region = job.compute.regions[0]
    (policy_copy / "rules" / "zz_edited.rego").write_text(EXTRA_RULE % region)
    edited = load_policies(policy_copy)
    assert Engine.shared(edited) is not engine
    after = evaluate(job, edited).to_json()
    assert _verdicts(after)[region] == "deny"
    assert any(r["rule"] == "TEST-EDITED" for r in after["decisions"][0]["reasons"])

    # an edited fact (the data document), rules as first loaded: a new engine, a new decision
    (policy_copy / "rules" / "zz_edited.rego").unlink()
    assert Engine.shared(load_policies(policy_copy)) is engine  # back to the first content
    edit_yaml(policy_copy / "regions.yaml", lambda d: d["providers"]["aws"]["regions"].pop(region))
    unlisted = load_policies(policy_copy)
    assert Engine.shared(unlisted) is not engine
    assert _verdicts(evaluate(job, unlisted).to_json())[region] == "deny"  # an unlisted region


def test_in_memory_change_of_facts_is_a_new_engine(policy_copy: Path) -> None:
    """A policy set changed in memory (not on disk) is keyed by what the interpreter gets."""
    policies = load_policies(policy_copy)
    engine = Engine.shared(policies)
    document = policies.data_document()
    document["facts"]["providers"] = {}
    assert Engine.shared(policies, data=document) is not engine
    assert Engine.shared(policies) is engine
