"""Property (issue 17): no `allow` rests on a fact that is unknown, low-confidence or stale
unless an exception bound to that organisation and that fact covers it.

Specs are generated (hypothesis, derandomized: the same examples on every run) over every
data class, every origin on record (and one that is not), where the data is stored (nowhere
given, one region, shards in two regions), headquarters with and without a parent, and every
region of the catalog as the candidate. The facts an allow must rest on are worked out here
in Python from the fact files, independently of the Rego rules; for every allow, each of
them that is weak or stale must be cited by a waived reason whose exception binds to the
spec's organisation and names that fact.
"""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from policy_helpers import POLICIES, job_from

from burst.policy import PolicySet, load_policies
from burst.policy.engine import Engine, input_document
from burst.policy.loader import rule_catalog
from burst.spec import BurstJob

TODAY = dt.date(2026, 11, 23)
SHIPPED = load_policies(POLICIES)
CATALOG = [
    (p, r) for p, pr in SHIPPED.regions.providers.items() for r in pr.regions
]  # every region
ORIGINS = [*SHIPPED.jurisdictions.jurisdictions, "ZZ"]
CLASSES = list(SHIPPED.data_classes.data_classes)
COUNTRIES = sorted({*SHIPPED.export.screened_countries, "CN", "MO", "US", "RU", "SG"})
REGION_CODES = sorted({r for _, r in CATALOG})

ORG = "Property Test Org Pte Ltd"
# a test sign-off for ORG covering several weak facts, so that allows resting on signed-off
# facts are generated too (the shipped demo sign-offs cover Example Labs Pte Ltd)
SIGNOFF = {
    "exceptions": [
        {
            "id": "property-signoff",
            "rule": "FACT-LOW-CONFIDENCE",
            "scope": {
                "organization": {"name": ORG, "headquarters": "SG"},
                "facts": [
                    "export.screened_headquarters",
                    "export.destination_licence",
                    "jurisdictions.MY.localization_general",
                    *(f"regions.{p}.{r}.country_groups" for p, r in CATALOG),
                ],
                "regions": sorted({r for _, r in CATALOG}),
                "providers": sorted({p for p, _ in CATALOG}),
            },
            "approver": "Test Reviewer <review@example.com>",
            "approved": "2026-11-01",
            "expires": "2027-10-31",
            "justification": "property-test sign-off of a few weak facts for one organisation",
        }
    ]
}


@pytest.fixture(scope="module")
def policies(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    dest = tmp_path_factory.mktemp("prop") / "policies"
    shutil.copytree(POLICIES, dest, ignore=shutil.ignore_patterns("keys", "admission"))
    (dest / "exceptions" / "property.yaml").write_text(yaml.safe_dump(SIGNOFF))
    return load_policies(dest)


@pytest.fixture(scope="module")
def engine(policies: PolicySet) -> Engine:
    return Engine(policies)


def weak_or_stale(fact: dict[str, Any], stale_before: dt.date) -> bool:
    return fact["confidence"] in ("low", "unknown") or (
        dt.date.fromisoformat(str(fact["last_verified"])) < stale_before
    )


def jurisdiction_of(country: str) -> str | None:
    found = [c for c, j in SHIPPED.jurisdictions.jurisdictions.items() if country in j.countries]
    return found[0] if len(found) == 1 else None


def region_country(code: str) -> str | None:
    found = {
        pr.regions[code].country for pr in SHIPPED.regions.providers.values() if code in pr.regions
    }
    return found.pop() if len(found) == 1 else None


def relied_on(job: BurstJob, provider: str, region: str) -> dict[str, dict[str, Any]]:
    """The facts an allow of (provider, region) for ``job`` must rest on, from the fact
    files (the reading of the fact sheet the rules encode, restated here in Python)."""
    doc = SHIPPED.data_document()["facts"]
    j = SHIPPED.jurisdictions.jurisdictions
    dest = SHIPPED.regions.providers[provider].regions[region].country
    out: dict[str, dict[str, Any]] = {f"regions.{provider}": doc["regions"][provider]}
    # export: every GPU type the test uses is 3A090.a
    groups = doc["regions"][provider]["regions"][region]["country_groups"]
    out[f"regions.{provider}.{region}.country_groups"] = groups
    out["export.headquarters_rule"] = doc["export"]["headquarters_rule"]
    hqs = {job.organization.headquarters, job.organization.parent_headquarters} - {None}
    if hqs & set(SHIPPED.export.screened_countries):
        out["export.screened_headquarters"] = doc["export"]["screened_headquarters"]
    if dest in SHIPPED.export.destination_licence_countries:
        out["export.destination_licence"] = doc["export"]["destination_licence"]
    origin = j.get(job.data.origin)
    if origin is None:
        return out
    leaves = dest not in origin.countries
    if leaves and origin.localization_general is not None:
        out[f"jurisdictions.{job.data.origin}.localization_general"] = doc["jurisdictions"][
            job.data.origin
        ]["localization_general"]
    if origin.host is not None:
        host = j[jurisdiction_of(origin.host) or ""]
        if any(job.data.classification in loc.classes for loc in host.localization):
            out[f"jurisdictions.{job.data.origin}.host_localization"] = doc["jurisdictions"][
                job.data.origin
            ]["host_localization"]
    stored = list(job.data.shards or {}) or ([job.data.region] if job.data.region else [])
    # data stored in another country and moved out of it rests on that country's
    # localisation statement too (Malaysia's and Qatar's are low)
    for code in stored:
        country = region_country(code)
        left = jurisdiction_of(country) if country is not None and country != dest else None
        if left and left != job.data.origin and j[left].localization_general is not None:
            out[f"jurisdictions.{left}.localization_general"] = doc["jurisdictions"][left][
                "localization_general"
            ]
    if SHIPPED.data_classes.data_classes[job.data.classification].personal:
        sources = {job.data.origin} if leaves else set()
        for code in stored:
            country = region_country(code)
            if country is not None and country != dest:
                sources.add(jurisdiction_of(country) or "")
        for code in sources:
            if code and j[code].outbound is not None:
                out[f"jurisdictions.{code}.outbound"] = doc["jurisdictions"][code]["outbound"]
        dest_code = jurisdiction_of(dest)
        if sources and dest_code and j[dest_code].inbound_rented_region is not None:
            out[f"jurisdictions.{dest_code}.inbound_rented_region"] = doc["jurisdictions"][
                dest_code
            ]["inbound_rented_region"]
    return out


storage = st.one_of(
    st.just({"region": None}),
    st.sampled_from(REGION_CODES).map(lambda r: {"region": r}),
    st.lists(st.sampled_from(REGION_CODES), min_size=2, max_size=2, unique=True).map(
        lambda rs: {"region": rs[0], "shards": {rs[0]: 0.005, rs[1]: 0.005}}
    ),
)
specs = st.fixed_dictionaries(
    {
        "classification": st.one_of(
            st.sampled_from(CLASSES), st.sampled_from(["public", "internal", "personal"])
        ),
        "origin": st.one_of(st.sampled_from(ORIGINS), st.sampled_from(["SG", "MY", "QA", "ID"])),
        "storage": storage,
        # (name, headquarters, parent): often exactly the organisation a sign-off binds to,
        # else a near miss (another parent or headquarters) or anyone at all
        "who": st.one_of(
            st.just((ORG, "SG", None)),
            st.just(("Example Labs Pte Ltd", "SG", None)),
            st.tuples(st.just(ORG), st.just("SG"), st.sampled_from(COUNTRIES)),
            st.tuples(
                st.sampled_from([ORG, "Example Labs Pte Ltd", "Someone Else Ltd"]),
                st.sampled_from(COUNTRIES),
                st.one_of(st.none(), st.sampled_from(COUNTRIES)),
            ),
        ),
        "safeguards": st.lists(
            st.sampled_from(["scc", "contract", "bcr", "consent", "tia", "authorisation"]),
            max_size=4,
            unique=True,
        ),
        "candidate": st.sampled_from(CATALOG),
    }
)


# 120 examples (derandomized: the same ones every run): 20 of them are allowed, each resting on
# a signed-off weak fact, which is where the property bites; the rest are denials and reviews
# it only evaluates. (250 examples reached 39 allows for twice the time: each evaluation is a
# rego-cpp query of 0.1 s or more here.)
@settings(
    max_examples=120,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=specs)
def test_no_allow_rests_on_an_unsure_fact_without_a_bound_sign_off(
    engine: Engine, policies: PolicySet, case: dict[str, Any]
) -> None:
    provider, region = case["candidate"]
    job = job_from(
        {
            "name": "property",
            "organization": {
                "name": case["who"][0],
                "headquarters": case["who"][1],
                "parent_headquarters": case["who"][2],
            },
            "data": {
                "classification": case["classification"],
                "origin": case["origin"],
                "transfer_safeguards": case["safeguards"],
                "shards": None,
                **case["storage"],
            },
            "compute": {"regions": [region], "providers": [provider]},
        }
    )
    stale_before = TODAY - dt.timedelta(days=policies.settings.max_fact_age_days)
    doc = input_document(
        job, region, provider, today=TODAY, max_fact_age_days=policies.settings.max_fact_age_days
    )
    d = engine.evaluate(doc)
    if d["verdict"] != "allow":
        return
    assert not [r for r in d["reasons"] if r["effect"] == "deny"], d["reasons"]
    assert not [r for r in d["reasons"] if r["effect"] == "review" and "waived_by" not in r], d[
        "reasons"
    ]
    exceptions = {e.id: e for e in policies.exceptions}
    for fact_id, fact in relied_on(job, provider, region).items():
        if not weak_or_stale(fact, stale_before):
            continue
        waived = [r for r in d["reasons"] if r.get("fact") == fact_id and "waived_by" in r]
        assert waived, f"allow of {provider}/{region} rests on unsure {fact_id} unwaived"
        for r in waived:
            e = exceptions[r["waived_by"]]
            org = e.scope.organization
            assert org.name.strip().lower() == job.organization.name.strip().lower()
            assert org.headquarters == job.organization.headquarters
            assert org.parent_headquarters == job.organization.parent_headquarters
            assert fact_id in e.scope.facts and region in e.scope.regions
    # the allow explains itself: every rule that could have blocked it is listed as satisfied
    # (or, for a review rule, appears waived), each with its source
    assert all(s["source"] and s["message"] for s in d["satisfied"])
    answered = {s["rule"] for s in d["satisfied"]} | {
        r["rule"] for r in d["reasons"] if "waived_by" in r
    }
    missing = blocking_rules(policies) - answered
    assert not missing, f"allow of {provider}/{region} does not say what satisfied {missing}"


def blocking_rules(policies: PolicySet) -> set[str]:
    """Every rule whose header says it can deny or review (not the info notes)."""
    out = set()
    for rule, (module, line) in rule_catalog(policies).items():
        effect = module.text.splitlines()[line + 1]
        assert effect.startswith("# effect:"), (rule, effect)
        if "deny" in effect or "review" in effect:
            out.add(rule)
    return out


def test_the_generator_reaches_allows(engine: Engine) -> None:
    """The property is not vacuous: the bound sign-off makes a generated-style spec allowed,
    and the same spec by another organisation is not."""
    base: dict[str, Any] = {
        "name": "property",
        "organization": {"name": ORG, "headquarters": "SG", "parent_headquarters": None},
        "data": {"classification": "internal", "origin": "SG", "region": "ap-southeast-1"},
        "compute": {"regions": ["asia-southeast1"], "providers": ["gcp"]},
    }
    ok = engine.evaluate(
        input_document(job_from(base), "asia-southeast1", "gcp", today=TODAY, max_fact_age_days=365)
    )
    assert ok["verdict"] == "allow", ok["reasons"]
    other = job_from({**base, "organization": {**base["organization"], "name": "Other Ltd"}})
    no = engine.evaluate(
        input_document(other, "asia-southeast1", "gcp", today=TODAY, max_fact_age_days=365)
    )
    assert no["verdict"] == "review"


def test_blocking_rules_are_the_catalog_less_notes(policies: PolicySet) -> None:
    rules = blocking_rules(policies)
    assert {"XFER-NO-SAFEGUARD", "RES-LOCALIZATION", "FACT-LOW-CONFIDENCE", "PROV-CMK"} <= rules
    assert not rules & {"EXP-HQ-SCREENED", "EXP-DEST-LICENCE", "EXC-NOT-IN-FORCE"}


def test_property_module_reads_the_policies_it_tests() -> None:
    assert Path(POLICIES / "regions.yaml").is_file() and len(CATALOG) == 29
    assert len(ORIGINS) == 16 and len(CLASSES) == 8
