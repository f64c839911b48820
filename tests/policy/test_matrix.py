"""The decision matrix of issue 5: real specs (BurstJob), the shipped policies, real Rego
evaluation (regopy). Each case names the verdict and the rule that must be cited.

Every spec here is named "policy-matrix" and made by a test organisation, so the demo's
shipped sign-offs (bound to Example Labs Pte Ltd) never apply. Allow cases that rent h100
(3A090.a) as an SG-headquartered organisation are named SIGNED (made by SIGNED_ORG): SG's
place outside D:5 and the regions' country groups are low-confidence facts, so they are
allowed only through the test-only sign-off in policy_helpers.SIGNOFF, bound to that
organisation (the same mechanism the demo uses); the same spec unsigned is `review` (case
sg-personal-home-unsigned). The data is taken to be stored at its origin (data.region
null) unless a case says otherwise."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest
from policy_helpers import MATRIX_NAME, SIGNED, SIGNOFF_FACTS, job_from

from burst.policy import PolicySet, evaluate, load_policies

TODAY = dt.date(2026, 11, 21)  # the facts are dated 2026-06-16; max age 365 days

SG_PERSONAL: dict[str, Any] = {"data": {"classification": "personal", "origin": "SG"}}
SG_PERSONAL_SIGNED: dict[str, Any] = {**SG_PERSONAL, "name": SIGNED}
UAE_HEALTH: dict[str, Any] = {
    "organization": {"headquarters": "AE"},
    "data": {"classification": "health", "origin": "AE", "transfer_safeguards": ["scc", "consent"]},
}
KSA_GOV: dict[str, Any] = {
    "organization": {"headquarters": "SA"},
    "data": {"classification": "government", "origin": "SA", "transfer_safeguards": ["scc", "tia"]},
}
D5_RUBIN: dict[str, Any] = {
    "organization": {"headquarters": "SG", "parent_headquarters": "CN"},
    "compute": {"gpu_type": "rubin"},
}
CLOSED_BIG: dict[str, Any] = {"model": {"weights": "closed", "training_ops": 3.0e26}}

# (case id, spec changes, provider, region, verdict, rule that must be among the reasons)
MATRIX: list[tuple[str, dict[str, Any], str, str, str, str | None]] = [
    ("sg-personal-home", SG_PERSONAL_SIGNED, "aws", "ap-southeast-1", "allow", None),
    ("sg-personal-home-gcp", SG_PERSONAL_SIGNED, "gcp", "asia-southeast1", "allow", None),
    (
        "sg-personal-home-unsigned",
        SG_PERSONAL,
        "aws",
        "ap-southeast-1",
        "review",
        "FACT-LOW-CONFIDENCE",
    ),
    (
        "sg-personal-uae-no-safeguard",
        SG_PERSONAL,
        "aws",
        "me-central-1",
        "deny",
        "XFER-NO-SAFEGUARD",
    ),
    (
        "sg-personal-uae-scc",
        {**SG_PERSONAL, "data": {**SG_PERSONAL["data"], "transfer_safeguards": ["scc"]}},
        "aws",
        "me-central-1",
        "review",
        "FACT-LOW-CONFIDENCE",
    ),
    (
        "sg-personal-jakarta-contract",
        {
            "name": SIGNED,
            "data": {
                "classification": "personal",
                "origin": "SG",
                "transfer_safeguards": ["contract"],
            },
        },
        "aws",
        "ap-southeast-3",
        "allow",
        None,
    ),
    ("uae-health-singapore", UAE_HEALTH, "aws", "ap-southeast-1", "deny", "RES-LOCALIZATION"),
    ("uae-health-jakarta", UAE_HEALTH, "gcp", "asia-southeast2", "deny", "RES-LOCALIZATION"),
    ("uae-health-bahrain", UAE_HEALTH, "aws", "me-south-1", "deny", "RES-LOCALIZATION"),
    ("uae-health-qatar", UAE_HEALTH, "azure", "qatarcentral", "deny", "RES-LOCALIZATION"),
    ("uae-health-riyadh", UAE_HEALTH, "oci", "me-riyadh-1", "deny", "RES-LOCALIZATION"),
    ("uae-health-tel-aviv", UAE_HEALTH, "aws", "il-central-1", "deny", "RES-LOCALIZATION"),
    ("uae-health-in-uae", UAE_HEALTH, "azure", "uaenorth", "review", "PROV-CMK"),
    ("ksa-gov-uae", KSA_GOV, "oci", "me-dubai-1", "deny", "RES-LOCALIZATION"),
    ("ksa-gov-doha", KSA_GOV, "gcp", "me-central1", "deny", "RES-LOCALIZATION"),
    ("ksa-gov-in-kingdom", KSA_GOV, "gcp", "me-central2", "review", "PROV-CMK"),
    ("d5-rubin-singapore", D5_RUBIN, "aws", "ap-southeast-1", "deny", "EXP-HQ-D5"),
    ("d5-rubin-dammam", D5_RUBIN, "gcp", "me-central2", "deny", "EXP-HQ-D5"),
    (
        "d5-hq-h100-jeddah",
        {"organization": {"headquarters": "CN"}},
        "oci",
        "me-jeddah-1",
        "deny",
        "EXP-HQ-D5",
    ),
    ("closed-1e26-abroad", CLOSED_BIG, "aws", "ap-southeast-3", "review", "EXP-WEIGHTS-4E091"),
    ("closed-1e26-home", {**CLOSED_BIG, "name": SIGNED}, "aws", "ap-southeast-1", "allow", None),
    (
        "closed-no-ops-abroad",
        {"model": {"weights": "closed"}},
        "aws",
        "me-central-1",
        "review",
        "EXP-WEIGHTS-OPS-UNKNOWN",
    ),
    ("unknown-region", {}, "aws", "eu-nowhere-9", "deny", "REGION-UNKNOWN"),
    ("unknown-provider", {}, "acme", "ap-southeast-1", "deny", "PROVIDER-UNKNOWN"),
    (
        "unknown-gpu",
        {"compute": {"gpu_type": "mystery9000"}},
        "aws",
        "ap-southeast-1",
        "review",
        "EXP-ACCEL-UNKNOWN",
    ),
    (
        "unscreened-hq",
        {"organization": {"headquarters": "BR"}},
        "aws",
        "ap-southeast-1",
        "review",
        "EXP-HQ-UNSCREENED",
    ),
    (
        "confidential-cmk-unknown",
        {"data": {"classification": "confidential"}},
        "aws",
        "ap-southeast-1",
        "review",
        "PROV-CMK",
    ),
    (
        "vietnam-personal-abroad",
        {"data": {"classification": "personal", "origin": "VN"}},
        "aws",
        "ap-southeast-1",
        "review",
        "XFER-FILING",
    ),
    (
        "malaysia-personal-scc-no-tia",
        {"data": {"classification": "personal", "origin": "MY", "transfer_safeguards": ["scc"]}},
        "aws",
        "ap-southeast-1",
        "review",
        "XFER-ASSESSMENT",
    ),
    (
        # consent satisfies s.129 without an assessment, but the allow would rest on the
        # sheet's LOW-confidence "no general localisation" fact for Malaysia (issue 17)
        "malaysia-personal-consent",
        {
            "name": SIGNED,
            "data": {
                "classification": "personal",
                "origin": "MY",
                "transfer_safeguards": ["consent"],
            },
        },
        "aws",
        "ap-southeast-1",
        "review",
        "FACT-LOW-CONFIDENCE",
    ),
    (
        "indonesia-government-abroad",
        {"data": {"classification": "government", "origin": "ID"}},
        "aws",
        "ap-southeast-1",
        "deny",
        "RES-LOCALIZATION",
    ),
    (
        "eu-personal-israel",
        {"data": {"classification": "personal", "origin": "EU"}},
        "gcp",
        "me-west1",
        "review",
        "INBOUND-UNKNOWN",
    ),
    (
        "eu-personal-singapore-no-scc",
        {"data": {"classification": "personal", "origin": "EU"}},
        "gcp",
        "asia-southeast1",
        "deny",
        "XFER-NO-SAFEGUARD",
    ),
    (
        "difc-personal-uae-onshore",
        {"data": {"classification": "personal", "origin": "AE-DIFC"}},
        "azure",
        "uaenorth",
        "deny",
        "XFER-NO-SAFEGUARD",
    ),
    (
        "china-personal-abroad-scc",
        {"data": {"classification": "personal", "origin": "CN", "transfer_safeguards": ["scc"]}},
        "aws",
        "ap-southeast-1",
        "review",
        "XFER-FILING",
    ),
    (
        "unknown-origin-personal",
        {"data": {"classification": "personal", "origin": "ZZ"}},
        "aws",
        "ap-southeast-1",
        "deny",
        "ORIGIN-UNKNOWN",
    ),
    (
        "export-controlled-data-abroad",
        {"data": {"classification": "export_controlled"}},
        "aws",
        "me-central-1",
        "review",
        "EXP-DATA-CONTROLLED",
    ),
]


def decide(
    policies: PolicySet, over: dict[str, Any], provider: str, region: str, today: dt.date = TODAY
) -> dict[str, Any]:
    job = job_from(
        {
            "name": MATRIX_NAME,
            **over,
            "data": {"region": None, **over.get("data", {})},
            "compute": {**over.get("compute", {}), "regions": [region], "providers": [provider]},
        }
    )
    record = evaluate(job, policies, today=today).to_json()
    assert len(record["decisions"]) == 1
    return record["decisions"][0]


@pytest.mark.parametrize(
    ("over", "provider", "region", "verdict", "rule"),
    [m[1:] for m in MATRIX],
    ids=[m[0] for m in MATRIX],
)
def test_matrix(
    matrix_policies: PolicySet,
    over: dict[str, Any],
    provider: str,
    region: str,
    verdict: str,
    rule: str | None,
) -> None:
    d = decide(matrix_policies, over, provider, region)
    rules = {r["rule"] for r in d["reasons"]}
    assert d["verdict"] == verdict, d["reasons"]
    if rule is not None:
        assert rule in rules
    for r in d["reasons"]:
        assert r["rule"] and r["message"] and r["source"], r
        assert "\n" not in r["message"]
    if verdict == "allow":
        assert not [
            r for r in d["reasons"] if r["effect"] in ("deny", "review") and "waived_by" not in r
        ]
        # a waiver is honoured only for the signed-off organisation, only for its facts
        for r in d["reasons"]:
            if "waived_by" in r:
                assert over.get("name") == SIGNED
                assert r["waived_by"] == "matrix-sg-hq-outside-d5"
                assert r["fact"] in SIGNOFF_FACTS


def test_matrix_is_large_enough() -> None:
    assert len(MATRIX) >= 25


def test_low_confidence_export_facts_never_allow(matrix_policies: PolicySet) -> None:
    """SG personal data at home on h100: the allow rests on the low-confidence screening of
    SG outside D:5; unsigned it is review, citing that fact; signed off it is allow."""
    d = decide(matrix_policies, SG_PERSONAL, "aws", "ap-southeast-1")
    low = {r["fact"] for r in d["reasons"] if r["rule"] == "FACT-LOW-CONFIDENCE"}
    assert d["verdict"] == "review"
    assert low == {"export.screened_headquarters", "regions.aws.ap-southeast-1.country_groups"}
    signed = decide(matrix_policies, SG_PERSONAL_SIGNED, "aws", "ap-southeast-1")
    assert signed["verdict"] == "allow"
    # the licence-required destination rests on a low-confidence fact the sign-off does not
    # cover: internal data to the UAE stays review even for the signed-off spec
    uae = decide(
        matrix_policies,
        {"name": SIGNED, "data": {"classification": "internal"}},
        "aws",
        "me-central-1",
    )
    low = {
        r["fact"]
        for r in uae["reasons"]
        if r["rule"] == "FACT-LOW-CONFIDENCE" and "waived_by" not in r
    }
    assert uae["verdict"] == "review"
    assert low == {"export.destination_licence", "regions.aws.me-central-1.country_groups"}


def test_demo_sign_offs_bind_to_the_demo_organisation(shipped: PolicySet) -> None:
    """The shipped sign-offs bind to Example Labs Pte Ltd (SG, no parent): the quickstart is
    allowed in its three regions under any spec name; another organisation with a spec named
    "quickstart" is review everywhere, and the record names the mismatch."""
    record = evaluate(job_from({}), shipped, today=TODAY).to_json()
    assert record["counts"]["allow"] == 3
    for d in record["decisions"]:
        waivers = {(r["fact"], r["waived_by"]) for r in d["reasons"] if "waived_by" in r}
        assert ("export.screened_headquarters", "example-labs-sg-hq-outside-d5") in waivers
    renamed = evaluate(job_from({"name": "not-the-quickstart"}), shipped, today=TODAY).to_json()
    assert renamed["counts"]["allow"] == 3
    other = evaluate(
        job_from({"organization": {"name": "Quickstart Copycat Ltd"}}), shipped, today=TODAY
    ).to_json()
    assert other["spec_name"] == "quickstart"
    assert other["counts"] == {"allow": 0, "review": 3, "deny": 0}
    for d in other["decisions"]:
        notes = [r["message"] for r in d["reasons"] if r["rule"] == "EXC-NOT-APPLICABLE"]
        assert notes and all("organisation 'Quickstart Copycat Ltd'" in m for m in notes)
    # the same name under another headquarters, or with a parent, is another organisation
    for org in ({"headquarters": "MY"}, {"parent_headquarters": "SG"}):
        moved = evaluate(job_from({"organization": org}), shipped, today=TODAY).to_json()
        assert moved["counts"]["allow"] == 0, org


def test_sign_off_bound_to_a_spec_hash_applies_to_that_spec_only(policy_copy: Path) -> None:
    job = job_from({"name": SIGNED, "data": {"classification": "internal", "region": None}})
    (policy_copy / "exceptions" / "matrix-signoff.yaml").unlink()
    (policy_copy / "exceptions" / "hash.yaml").write_text(SIGNOFF_BY_HASH.format(sha=job.sha256()))
    ps = load_policies(policy_copy)
    one = {"compute": {"regions": ["ap-southeast-1"], "providers": ["aws"]}}
    bound = job.model_copy(update={"compute": job.compute.model_copy(update=one["compute"])})
    # the hash is of the spec as signed: changing the candidate list changes the hash
    assert bound.sha256() != job.sha256()
    rec = evaluate(job, ps, today=TODAY).to_json()
    d = next(d for d in rec["decisions"] if d["region"] == "ap-southeast-1")
    assert d["verdict"] == "allow"
    rec2 = evaluate(bound, ps, today=TODAY).to_json()
    d2 = rec2["decisions"][0]
    assert d2["verdict"] == "review"
    assert any(
        r["rule"] == "EXC-NOT-APPLICABLE" and "spec sha256" in r["message"] for r in d2["reasons"]
    )


SIGNOFF_BY_HASH = """exceptions:
  - id: by-hash
    rule: FACT-LOW-CONFIDENCE
    scope:
      organization: {{name: Matrix Signed Org Pte Ltd, headquarters: SG}}
      facts: [export.screened_headquarters, regions.aws.ap-southeast-1.country_groups]
      regions: [ap-southeast-1]
      providers: [aws]
      spec_sha256: ["{sha}"]
    approver: "Test Reviewer <review@example.com>"
    approved: 2026-11-21
    expires: 2027-11-20
    justification: "test sign-off bound to one spec hash"
"""


def test_d5_rule_cites_the_export_rule_and_its_source(shipped: PolicySet) -> None:
    d = decide(shipped, D5_RUBIN, "aws", "ap-southeast-1")
    reason = next(r for r in d["reasons"] if r["rule"] == "EXP-HQ-D5")
    assert "744.23" in reason["message"] and "CN" in reason["message"]
    assert reason["source"].startswith("https://")
    assert reason["fact"] == "export.headquarters_rule"


def test_localization_reason_cites_the_health_law(shipped: PolicySet) -> None:
    d = decide(shipped, UAE_HEALTH, "aws", "ap-southeast-1")
    reason = next(r for r in d["reasons"] if r["rule"] == "RES-LOCALIZATION")
    assert reason["fact"] == "jurisdictions.AE.localization.health-ict-law"
    assert reason["effect"] == "deny" and reason["source"].startswith("https://")


def test_low_confidence_inbound_fact_is_the_reason_for_review(
    matrix_policies: PolicySet,
) -> None:
    over = {
        "name": SIGNED,
        "data": {"classification": "personal", "origin": "SG", "transfer_safeguards": ["scc"]},
    }
    d = decide(matrix_policies, over, "aws", "me-central-1")
    facts = {
        r["fact"]
        for r in d["reasons"]
        if r["rule"] == "FACT-LOW-CONFIDENCE" and "waived_by" not in r
    }
    assert facts == {
        "jurisdictions.AE.inbound_rented_region",
        "export.destination_licence",
        "regions.aws.me-central-1.country_groups",
    }


def test_quickstart_has_an_allowed_home_region(shipped: PolicySet) -> None:
    # allowed through the shipped, signed-off exception scoped to the quickstart
    record = evaluate(job_from({}), shipped, today=TODAY).to_json()
    assert {"region": "ap-southeast-1", "provider": "aws"} in record["allowed"]


def test_denied_example_denies_every_candidate(shipped: PolicySet) -> None:
    from burst.spec import load_spec

    record = evaluate(
        load_spec(Path(__file__).parents[2] / "examples" / "denied.yaml"), shipped, today=TODAY
    ).to_json()
    assert record["allowed"] == [] and record["verdict"] == "deny"
    assert all(d["verdict"] == "deny" for d in record["decisions"])
    assert all(d["reasons"][0]["rule"] == "RES-LOCALIZATION" for d in record["decisions"])


def test_stale_facts_never_allow(matrix_policies: PolicySet) -> None:
    # the sign-off is in force on both dates, so staleness alone makes the difference
    now = decide(matrix_policies, SG_PERSONAL_SIGNED, "aws", "ap-southeast-1")
    assert now["verdict"] == "allow"
    d = decide(
        matrix_policies, SG_PERSONAL_SIGNED, "aws", "ap-southeast-1", today=dt.date(2027, 7, 1)
    )
    assert d["verdict"] == "review"
    assert "FACT-STALE" in {r["rule"] for r in d["reasons"] if "waived_by" not in r}


def test_max_fact_age_setting_is_honoured(policy_copy: Path) -> None:
    (policy_copy / "settings.yaml").write_text("max_fact_age_days: 30\n")
    d = decide(load_policies(policy_copy), SG_PERSONAL_SIGNED, "aws", "ap-southeast-1")
    assert d["verdict"] == "review"
    record = evaluate(
        job_from(SG_PERSONAL_SIGNED),
        load_policies(policy_copy),
        today=TODAY,
        max_fact_age_days=400,
    ).to_json()
    assert record["decisions"][0]["verdict"] == "allow"


def test_provider_without_cmk_denies_confidential(policy_copy: Path, edit_yaml: Any) -> None:
    def no_cmk(doc: Any) -> None:
        doc["providers"]["gcp"]["customer_managed_keys"] = {
            "rule": "test fact: no customer-managed keys",
            "source": ["test"],
            "confidence": "high",
            "last_verified": "2026-10-01",
            "available": False,
        }

    edit_yaml(policy_copy / "providers.yaml", no_cmk)
    over = {"name": SIGNED, "data": {"classification": "confidential"}}
    d = decide(load_policies(policy_copy), over, "gcp", "asia-southeast1")
    assert d["verdict"] == "deny"
    assert d["reasons"][0]["rule"] == "PROV-CMK" and "none offered" in d["reasons"][0]["message"]

    # the same data on a provider whose CMK is on record as available and sure: allowed
    def yes_cmk(doc: Any) -> None:
        doc["providers"]["gcp"]["customer_managed_keys"].update(available=True)

    edit_yaml(policy_copy / "providers.yaml", yes_cmk)
    assert decide(load_policies(policy_copy), over, "gcp", "asia-southeast1")["verdict"] == "allow"


EXCEPTION = """exceptions:
  - id: {id}
    rule: PROV-CMK
    scope:
      organization: {{name: Matrix Signed Org Pte Ltd, headquarters: SG}}
      facts: [providers.aws.customer_managed_keys]
      regions: [ap-southeast-1]
      providers: [aws]
    approver: "Sam Security <sam@example.com>"
    approved: {approved}
    expires: {expires}
    justification: "CMK availability checked in the AWS KMS console for this account"
"""


def write_exception(policy_copy: Path, ident: str, approved: str, expires: str) -> None:
    (policy_copy / "exceptions" / f"{ident}.yaml").write_text(
        EXCEPTION.format(id=ident, approved=approved, expires=expires)
    )


CONF = {"name": SIGNED, "data": {"classification": "confidential"}}


def test_exception_in_force_turns_review_into_allow(policy_copy: Path) -> None:
    write_exception(policy_copy, "cmk-2026", "2026-06-01", "2027-01-31")
    d = decide(load_policies(policy_copy), CONF, "aws", "ap-southeast-1")
    assert d["verdict"] == "allow"
    waived = [r for r in d["reasons"] if r.get("waived_by") == "cmk-2026"]
    assert waived and waived[0]["waiver_expires"] == "2027-01-31"


def test_expired_exception_is_not_honoured(policy_copy: Path) -> None:
    write_exception(policy_copy, "cmk-2025", "2025-06-01", "2026-06-01")
    d = decide(load_policies(policy_copy), CONF, "aws", "ap-southeast-1")
    assert d["verdict"] == "review"
    assert "EXC-NOT-IN-FORCE" in {r["rule"] for r in d["reasons"]}


def test_exception_outside_its_scope_is_not_honoured(policy_copy: Path) -> None:
    write_exception(policy_copy, "cmk-2026", "2026-06-01", "2027-01-31")
    assert decide(load_policies(policy_copy), CONF, "aws", "ap-southeast-3")["verdict"] == "review"


def test_exception_cannot_turn_deny_into_allow(policy_copy: Path) -> None:
    (policy_copy / "exceptions" / "x.yaml").write_text(
        EXCEPTION.format(id="x", approved="2026-06-01", expires="2027-01-31")
        .replace("PROV-CMK", "XFER-NO-SAFEGUARD")
        .replace("providers.aws.customer_managed_keys", "jurisdictions.SG.outbound")
        .replace("Matrix Signed Org", "Matrix Unsigned Org")
        .replace("ap-southeast-1", "me-central-1")
    )
    d = decide(load_policies(policy_copy), SG_PERSONAL, "aws", "me-central-1")
    assert d["verdict"] == "deny"
