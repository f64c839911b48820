"""The decision record and the provision gate (require_allow)."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from policy_helpers import POLICIES, job_from

from burst.errors import BadInputError, PolicyRefusal
from burst.policy import evaluate, first_reason, load_policies, require_allow
from burst.policy.loader import policy_sha256

TODAY = dt.date(2026, 11, 21)


def test_record_fields(shipped: object) -> None:
    job = job_from({})
    record = evaluate(job, shipped, today=TODAY).to_json()  # type: ignore[arg-type]
    assert record["spec_sha256"] == job.sha256()
    assert record["policy_sha256"] == policy_sha256(POLICIES)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record["created_at"])
    assert record["evaluated_on"] == "2026-11-21"
    assert [(d["region"], d["provider"]) for d in record["decisions"]] == [
        ("ap-southeast-1", "aws"),
        ("ap-southeast-3", "aws"),
        ("me-central-1", "aws"),
    ]
    for d in record["decisions"]:
        assert d["verdict"] in ("allow", "review", "deny")
        for r in d["reasons"]:
            assert {"rule", "message", "source", "effect"} <= set(r)
    assert record["counts"]["allow"] == len(record["allowed"])
    assert record["verdict"] == ("allow" if record["allowed"] else record["verdict"])


def test_require_allow_accepts_the_exact_spec_and_policies(shipped: object) -> None:
    job = job_from({})
    record = evaluate(job, shipped, today=TODAY).to_json()  # type: ignore[arg-type]
    decision = require_allow(record, job, POLICIES, "ap-southeast-1", "aws", today=TODAY)
    assert decision["verdict"] == "allow"


def test_require_allow_refuses_another_spec(shipped: object) -> None:
    record = evaluate(job_from({}), shipped, today=TODAY).to_json()  # type: ignore[arg-type]
    other = job_from({"training": {"steps": 31}})
    with pytest.raises(PolicyRefusal, match="spec sha256"):
        require_allow(record, other, POLICIES, "ap-southeast-1", "aws", today=TODAY)


def test_require_allow_refuses_changed_policies(policy_copy: Path) -> None:
    job = job_from({})
    record = evaluate(job, load_policies(policy_copy), today=TODAY).to_json()
    require_allow(record, job, policy_copy, "ap-southeast-1", "aws", today=TODAY)
    settings = policy_copy / "settings.yaml"
    settings.write_text(settings.read_text() + "# edited\n")
    with pytest.raises(PolicyRefusal, match="policies sha256") as info:
        require_allow(record, job, policy_copy, "ap-southeast-1", "aws", today=TODAY)
    assert info.value.exit_code == 3


def test_require_allow_refuses_review_deny_and_undecided(shipped: object) -> None:
    job = job_from({"data": {"classification": "personal", "origin": "SG"}})
    record = evaluate(job, shipped, today=TODAY).to_json()  # type: ignore[arg-type]
    with pytest.raises(PolicyRefusal, match="verdict for aws/me-central-1 is deny"):
        require_allow(record, job, POLICIES, "me-central-1", "aws", today=TODAY)
    with pytest.raises(PolicyRefusal, match="did not decide"):
        require_allow(record, job, POLICIES, "me-south-1", "aws", today=TODAY)


def test_require_allow_refuses_when_its_exception_expired(policy_copy: Path) -> None:
    (policy_copy / "exceptions" / "cmk.yaml").write_text(
        "exceptions:\n  - id: cmk\n    rule: PROV-CMK\n"
        "    scope: {organization: {name: Example Labs Pte Ltd, headquarters: SG}, facts: [providers.aws.customer_managed_keys], regions: [ap-southeast-1], providers: [aws]}\n"
        "    approver: Sam <sam@example.com>\n    approved: 2026-06-01\n"
        "    expires: 2026-12-01\n    justification: checked by hand in the console\n"
    )
    job = job_from({"data": {"classification": "confidential"}})
    record = evaluate(job, load_policies(policy_copy), today=TODAY).to_json()
    require_allow(record, job, policy_copy, "ap-southeast-1", "aws", today=TODAY)
    with pytest.raises(PolicyRefusal, match="expired"):
        require_allow(record, job, policy_copy, "ap-southeast-1", "aws", today=dt.date(2026, 12, 2))


def test_require_allow_rejects_what_is_not_a_record() -> None:
    with pytest.raises(BadInputError, match="not a decision record"):
        require_allow({"decisions": []}, job_from({}), POLICIES, "ap-southeast-1", "aws")


def test_first_reason_of_an_allow_is_a_real_reason() -> None:
    info = {"rule": "EXP-HQ-SCREENED", "effect": "info", "message": "outside D:5", "source": "s"}
    waived = {
        "rule": "FACT-LOW-CONFIDENCE",
        "effect": "review",
        "message": "low",
        "source": "s",
        "fact": "export.screened_headquarters",
        "waived_by": "x-1",
    }
    assert first_reason({"verdict": "allow", "reasons": [info]}) == "EXP-HQ-SCREENED: outside D:5"
    assert first_reason({"verdict": "allow", "reasons": [waived, info]}) == (
        "FACT-LOW-CONFIDENCE (export.screened_headquarters) waived by exception x-1"
    )
    assert first_reason({"verdict": "allow", "reasons": []}) == "no rule objects"
    blocking = {"rule": "PROV-CMK", "effect": "review", "message": "m", "source": "s"}
    assert first_reason({"verdict": "review", "reasons": [blocking, info]}) == "PROV-CMK: m"
