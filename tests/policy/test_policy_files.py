"""Malformed policy files: one clear error naming the file, the entry and the field (exit 2)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from burst.errors import EXIT_BAD_INPUT
from burst.policy import PolicyFileError, load_policies
from burst.policy.loader import policy_sha256


def error_of(policy_dir: Path) -> str:
    with pytest.raises(PolicyFileError) as info:
        load_policies(policy_dir)
    assert info.value.exit_code == EXIT_BAD_INPUT
    return info.value.one_line()


def test_shipped_policies_load(shipped: Any) -> None:
    assert {
        "SG",
        "MY",
        "ID",
        "TH",
        "VN",
        "PH",
        "AE",
        "AE-DIFC",
        "AE-ADGM",
        "SA",
        "QA",
        "BH",
        "IL",
        "CN",
        "EU",
    } <= set(shipped.jurisdictions.jurisdictions)
    assert set(shipped.regions.providers) == {"aws", "gcp", "azure", "oci"}
    assert "me-central-1" in shipped.regions.providers["aws"].regions


def test_region_with_bad_country_names_file_entry_field(
    policy_copy: Path, edit_yaml: Callable[..., None]
) -> None:
    edit_yaml(
        policy_copy / "regions.yaml",
        lambda d: d["providers"]["aws"]["regions"]["me-central-1"].update(country="UAE"),
    )
    msg = error_of(policy_copy)
    assert "regions.yaml:" in msg
    assert "entry aws/me-central-1" in msg and "field country" in msg and "'UAE'" in msg


def test_jurisdiction_missing_field(policy_copy: Path, edit_yaml: Callable[..., None]) -> None:
    edit_yaml(
        policy_copy / "jurisdictions.yaml",
        lambda d: d["jurisdictions"]["MY"]["outbound"].pop("confidence"),
    )
    msg = error_of(policy_copy)
    assert "jurisdictions.yaml" in msg and "entry MY" in msg
    assert "field outbound.confidence" in msg and "required field is missing" in msg


def test_bad_confidence_value(policy_copy: Path, edit_yaml: Callable[..., None]) -> None:
    edit_yaml(
        policy_copy / "export.yaml", lambda d: d["headquarters_rule"].update(confidence="certain")
    )
    msg = error_of(policy_copy)
    assert "export.yaml" in msg and "headquarters_rule" in msg and "confidence" in msg


def test_unknown_field_is_refused(policy_copy: Path, edit_yaml: Callable[..., None]) -> None:
    edit_yaml(policy_copy / "providers.yaml", lambda d: d["providers"]["oci"].update(cmk_typo=True))
    msg = error_of(policy_copy)
    assert "providers.yaml" in msg and "entry oci" in msg and "field cmk_typo" in msg


def test_not_yaml(policy_copy: Path) -> None:
    (policy_copy / "data_classes.yaml").write_text("data_classes:\n  public: [unclosed\n")
    msg = error_of(policy_copy)
    assert "data_classes.yaml:" in msg and "not valid YAML" in msg


def test_missing_fact_file(policy_copy: Path) -> None:
    (policy_copy / "providers.yaml").unlink()
    assert "providers.yaml: policy file is missing" in error_of(policy_copy)


def test_localization_names_unknown_data_class(
    policy_copy: Path, edit_yaml: Callable[..., None]
) -> None:
    edit_yaml(
        policy_copy / "jurisdictions.yaml",
        lambda d: d["jurisdictions"]["AE"]["localization"][0].update(classes=["medical"]),
    )
    msg = error_of(policy_copy)
    assert "entry AE" in msg and "localization.health-ict-law.classes" in msg and "medical" in msg


def test_exception_expiring_before_approval(policy_copy: Path) -> None:
    (policy_copy / "exceptions" / "bad.yaml").write_text(
        "exceptions:\n  - id: cmk-bad\n    rule: PROV-CMK\n"
        "    scope: {organization: {name: Example Labs Pte Ltd, headquarters: SG}, facts: [providers.aws.customer_managed_keys], regions: [ap-southeast-1], providers: [aws]}\n"
        "    approver: Sam <sam@example.com>\n    approved: 2026-06-01\n"
        "    expires: 2026-01-01\n    justification: checked by hand in the console\n"
    )
    msg = error_of(policy_copy)
    assert "exceptions/bad.yaml" in msg and "entry cmk-bad" in msg
    assert "expires must be after approved" in msg


def test_exception_naming_unknown_rule(policy_copy: Path) -> None:
    (policy_copy / "exceptions" / "typo.yaml").write_text(
        "exceptions:\n  - id: typo\n    rule: PROV-CMX\n"
        "    scope: {organization: {name: Example Labs Pte Ltd, headquarters: SG}, facts: [providers.aws.customer_managed_keys], regions: [ap-southeast-1], providers: [aws]}\n"
        "    approver: Sam <sam@example.com>\n    approved: 2026-06-01\n"
        "    expires: 2026-12-01\n    justification: checked by hand in the console\n"
    )
    msg = error_of(policy_copy)
    assert "exceptions/typo.yaml" in msg and "entry typo" in msg and "PROV-CMX" in msg


def test_exception_must_name_its_organisation_and_facts(policy_copy: Path) -> None:
    """A sign-off binds to what it was justified for: no organisation, or a wildcard fact,
    region or provider, is a bad policy file (exit 2), named with its entry and field."""
    (policy_copy / "exceptions" / "loose.yaml").write_text(
        "exceptions:\n  - id: loose\n    rule: PROV-CMK\n    scope: {specs: [quickstart]}\n"
        "    approver: Sam <sam@example.com>\n    approved: 2026-06-01\n"
        "    expires: 2026-12-01\n    justification: checked by hand in the console\n"
    )
    msg = error_of(policy_copy)
    assert "entry loose" in msg and "scope.organization" in msg and "required" in msg
    (policy_copy / "exceptions" / "loose.yaml").write_text(
        "exceptions:\n  - id: loose\n    rule: PROV-CMK\n"
        "    scope: {organization: {name: X Ltd, headquarters: SG}, facts: ['*'],\n"
        "            regions: [ap-southeast-1], providers: [aws]}\n"
        "    approver: Sam <sam@example.com>\n    approved: 2026-06-01\n"
        "    expires: 2026-12-01\n    justification: checked by hand in the console\n"
    )
    msg = error_of(policy_copy)
    assert "entry loose" in msg and "scope.facts" in msg and "no '*'" in msg


def test_rego_syntax_error_names_file_and_line(policy_copy: Path) -> None:
    from policy_helpers import job_from

    from burst.policy.record import evaluate

    rules = policy_copy / "rules" / "provider.rego"
    text = rules.read_text().replace(
        "cmk := provider.customer_managed_keys", "cmk := provider.customer_managed_keys {{"
    )
    rules.write_text(text)
    line = text[: text.index("{{")].count("\n") + 1
    with pytest.raises(PolicyFileError) as info:
        evaluate(job_from({}), load_policies(policy_copy)).to_json()
    assert f"rules/provider.rego:{line}" in info.value.one_line()


def test_whole_input_with_is_refused(policy_copy: Path) -> None:
    from burst.policy.testing import run_policy_tests

    (policy_copy / "rules" / "bad_test.rego").write_text(
        "package burst.bad_test\n\ntest_x if {\n"
        '\tdata.burst.preflight.verdict == "allow" with input as {}\n}\n'
    )
    with pytest.raises(PolicyFileError) as info:
        run_policy_tests(load_policies(policy_copy))
    assert "bad_test.rego:4" in info.value.one_line() and "with input as" in info.value.one_line()


def test_policy_hash_covers_facts_rules_exceptions_not_keys(policy_copy: Path) -> None:
    before = policy_sha256(policy_copy)
    (policy_copy / "keys").mkdir(exist_ok=True)
    (policy_copy / "keys" / "k.pub").write_text("not part of the legal decision")
    assert policy_sha256(policy_copy) == before
    rules = policy_copy / "rules" / "decision.rego"
    rules.write_text(rules.read_text() + "\n")
    assert policy_sha256(policy_copy) != before


@pytest.mark.e2e
def test_cli_reports_bad_policy_in_one_line(
    policy_copy: Path, edit_yaml: Callable[..., None], burst_cmd: list[str]
) -> None:
    edit_yaml(
        policy_copy / "regions.yaml",
        lambda d: d["providers"]["gcp"]["regions"]["me-central2"].pop("country"),
    )
    proc = subprocess.run(
        [*burst_cmd, "preflight", "examples/quickstart.yaml", "--policies", str(policy_copy)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "regions.yaml" in lines[0] and "entry gcp/me-central2" in lines[0]
    assert "field country" in lines[0] and "Traceback" not in proc.stderr


def test_every_rule_has_a_policy_test_case(shipped: Any) -> None:
    """Each rule in rules/*.rego is cited by at least one case in policies/tests/*.yaml."""
    import yaml

    from burst.policy.loader import rule_catalog

    cited: set[str] = set()
    for f in (shipped.root / "tests").glob("*.yaml"):
        for case in yaml.safe_load(f.read_text())["cases"]:
            cited.update(case.get("rules", []))
            cited.update(case.get("absent", []))
    missing = set(rule_catalog(shipped)) - cited
    assert not missing, f"rules without a test case: {sorted(missing)}"


def test_country_in_two_jurisdictions(policy_copy: Path, edit_yaml: Callable[..., None]) -> None:
    edit_yaml(
        policy_copy / "jurisdictions.yaml",
        lambda d: d["jurisdictions"]["AE-DIFC"].update(countries=["AE"]),
    )
    msg = error_of(policy_copy)
    assert "entry AE-DIFC" in msg and "field countries" in msg and "already in AE" in msg


def test_regions_carry_country_groups_and_spot_notice(shipped: Any) -> None:
    """Issue 5 item 1: every region states its EAR country groups (low confidence, as the
    fact sheet says) and its provider's spot notice, each with source and date."""
    expected_notice = {"aws": 120, "gcp": 30, "azure": 30, "oci": None}
    licence = set(shipped.export.destination_licence_countries)
    for pname, pr in shipped.regions.providers.items():
        for rname, region in pr.regions.items():
            cg, notice = region.country_groups, region.spot_notice
            assert cg.confidence == "low" and cg.source and cg.last_verified, (pname, rname)
            assert cg.destination_licence == (region.country in licence), (pname, rname)
            assert "D:5" in cg.not_in, (pname, rname)
            assert notice.seconds == expected_notice[pname], (pname, rname)
            assert notice.confidence == "high" and notice.source, (pname, rname)
    regions = shipped.regions.providers
    assert regions["aws"].regions["me-south-1"].country_groups.groups == ["D:4"]
    assert regions["gcp"].regions["me-west1"].country_groups.groups == ["D:4", "A:6"]
    assert regions["aws"].regions["ap-southeast-1"].country_groups.groups == []


def test_region_without_spot_notice_names_the_entry(
    policy_copy: Path, edit_yaml: Callable[..., None]
) -> None:
    edit_yaml(
        policy_copy / "regions.yaml",
        lambda d: d["providers"]["oci"]["regions"]["me-dubai-1"].pop("spot_notice"),
    )
    msg = error_of(policy_copy)
    assert "entry oci/me-dubai-1" in msg and "field spot_notice" in msg


def test_bad_country_group_names_the_field(
    policy_copy: Path, edit_yaml: Callable[..., None]
) -> None:
    def bad(d: Any) -> None:
        region = d["providers"]["aws"]["regions"]["il-central-1"]
        region["country_groups"] = {**region["country_groups"], "groups": ["D4"]}

    edit_yaml(policy_copy / "regions.yaml", bad)
    msg = error_of(policy_copy)
    assert "entry aws/il-central-1" in msg and "field country_groups.groups" in msg


def test_destination_licence_must_agree_with_export_facts(
    policy_copy: Path, edit_yaml: Callable[..., None]
) -> None:
    def flip(d: Any) -> None:
        region = d["providers"]["azure"]["regions"]["qatarcentral"]
        region["country_groups"] = {**region["country_groups"], "destination_licence": False}

    edit_yaml(policy_copy / "regions.yaml", flip)
    msg = error_of(policy_copy)
    assert "entry azure/qatarcentral" in msg and "destination_licence_countries" in msg
