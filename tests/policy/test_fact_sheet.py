"""Every fact the fact sheet gives is either encoded in the policies (with its confidence and
date) or listed in policies/facts-not-encoded.yaml with the reason (issue 17, class 4)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from factsheet import ORDER, fact_ids
from policy_helpers import POLICIES, REPO

from burst.policy import PolicySet

SHEET = REPO / "docs" / "reference" / "compliance-facts.md"
# the shared original, next to the checkout (or to the worktrees' directory) when present
SHARED = next(
    (
        d / "shared" / "reference" / "compliance-facts.md"
        for d in (REPO.parent, REPO.parent.parent)
        if (d / "shared" / "reference" / "compliance-facts.md").is_file()
    ),
    None,
)


def resolve(facts: dict[str, Any], fact_id: str) -> Any:
    """A policy fact id as the rules cite it -> the fact (None when there is none)."""
    parts = fact_id.split(".")
    kind, rest = parts[0], parts[1:]
    if kind == "export" and rest[:1] == ["accelerator_classes"]:
        return facts["export"]["accelerator_classes"].get(".".join(rest[1:]))
    if kind == "regions":
        prov = facts["regions"].get(rest[0])
        if prov is None or len(rest) == 1:
            return prov
        reg = prov["regions"].get(rest[1])
        return reg if reg is None or len(rest) == 2 else reg.get(rest[2])
    if kind == "jurisdictions" and len(rest) >= 3 and rest[1] == "localization":
        j = facts["jurisdictions"].get(rest[0]) or {}
        return next((d for d in j.get("localization", []) if d["id"] == rest[2]), None)
    node: Any = facts[kind]
    for part in rest:
        if not isinstance(node, dict) or part not in node:
            return None
        node = node[part]
    return node


@pytest.fixture(scope="module")
def sheet() -> dict[str, Any]:
    return fact_ids(SHEET)


@pytest.fixture(scope="module")
def encoded() -> dict[str, list[str]]:
    return dict(yaml.safe_load((POLICIES / "fact-sheet-map.yaml").read_text())["encoded"])


@pytest.fixture(scope="module")
def not_encoded() -> dict[str, str]:
    doc = yaml.safe_load((POLICIES / "facts-not-encoded.yaml").read_text())
    return dict(doc["not_encoded"])


def test_the_repository_copy_is_the_shared_sheet() -> None:
    if SHARED is None:
        pytest.skip("shared/reference/compliance-facts.md is not on this machine")
    assert SHEET.read_bytes() == SHARED.read_bytes(), "refresh docs/reference from shared/"


def test_the_sheet_scan_finds_its_facts(sheet: dict[str, Any]) -> None:
    # guards the scanner itself: a few ids of each kind, with the sheet's own confidence
    assert sheet["MY.localization"].confidence == "low"
    assert sheet["QA.localization"].confidence == "low"
    assert sheet["SG.outbound"].confidence == "high"
    assert sheet["VN.breach"].confidence == "low"  # "med (Decree 13) / low (PDPL 2025)"
    assert sheet["country_groups_for_checker.5"].confidence == "low"
    assert "regions.azure.uaecentral" in sheet and "timeline.2025-05-13" in sheet
    assert "unreliable.7" in sheet and "IL.source" not in sheet
    assert len(sheet) > 120


def test_every_sheet_fact_is_encoded_or_listed_with_a_reason(
    sheet: dict[str, Any], encoded: dict[str, list[str]], not_encoded: dict[str, str]
) -> None:
    both = set(encoded) & set(not_encoded)
    assert not both, f"both encoded and not encoded: {sorted(both)}"
    missing = set(sheet) - set(encoded) - set(not_encoded)
    assert not missing, f"sheet facts neither encoded nor listed: {sorted(missing)}"
    unknown = (set(encoded) | set(not_encoded)) - set(sheet)
    assert not unknown, f"ids the sheet does not give: {sorted(unknown)}"
    for ident, reason in not_encoded.items():
        assert isinstance(reason, str) and len(reason) > 20, ident


def test_encoded_facts_exist_with_confidence_and_date(
    shipped: PolicySet, encoded: dict[str, list[str]]
) -> None:
    facts = shipped.data_document()["facts"]
    for ident, targets in encoded.items():
        assert targets, ident
        for target in targets:
            fact = resolve(facts, target)
            assert isinstance(fact, dict), f"{ident}: no policy fact {target}"
            assert fact.get("confidence") in ORDER, f"{target}: no confidence"
            assert fact.get("last_verified"), f"{target}: no last_verified"


def test_no_policy_fact_is_surer_than_the_sheet(
    shipped: PolicySet, sheet: dict[str, Any], encoded: dict[str, list[str]]
) -> None:
    """A policy fact may not claim more confidence than the surest sheet fact it encodes
    (sheet facts that state no confidence do not count)."""
    facts = shipped.data_document()["facts"]
    support: dict[str, list[str]] = {}
    for ident, targets in encoded.items():
        conf = sheet[ident].confidence
        for target in targets:
            if conf is not None:
                support.setdefault(target, []).append(conf)
    for target, confs in support.items():
        best = max(confs, key=ORDER.__getitem__)
        mine = resolve(facts, target)["confidence"]
        assert ORDER[mine] <= ORDER[best], f"{target} is {mine}, the sheet says at most {best}"


def test_low_confidence_sheet_facts_stay_low(
    shipped: PolicySet, sheet: dict[str, Any], encoded: dict[str, list[str]]
) -> None:
    """Issue 17 class 4: what the sheet marks low is encoded low (not dropped, not raised),
    e.g. Malaysia's and Qatar's "no general localisation"."""
    facts = shipped.data_document()["facts"]
    for ident in ("MY.localization", "QA.localization", "country_groups_for_checker.5"):
        assert sheet[ident].confidence == "low"
        for target in encoded[ident]:
            assert resolve(facts, target)["confidence"] in ("low", "unknown"), target


def test_sheet_path_in_settings_names_the_sheet(shipped: PolicySet) -> None:
    assert shipped.settings.fact_sheet is not None
    assert Path(shipped.settings.fact_sheet).name == SHEET.name
