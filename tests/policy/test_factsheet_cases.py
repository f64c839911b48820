"""The fact-sheet case set (issue 17 re-test): 130+ cases written from
shared/reference/compliance-facts.md before burst was run on them, each the quickstart spec
with changes, judged by the real preflight (BurstJob, the shipped policies plus the sign-offs a
case lists, regopy). A case's `expect` is the verdict the sheet line in its `why` implies (a
list: either is safe); the runner is tests/policy/factsheet_cases.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from factsheet_cases import Runner, load_cases

DOC = load_cases()


@pytest.fixture(scope="module")
def runner(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runner]:
    yield Runner(DOC, Path(tmp_path_factory.mktemp("factsheet-policies")))


@pytest.mark.parametrize("case", DOC["cases"], ids=[c["name"] for c in DOC["cases"]])
def test_factsheet_case(runner: Runner, case: dict[str, Any]) -> None:
    decision = runner.decide(case)
    want = case["expect"] if isinstance(case["expect"], list) else [case["expect"]]
    blocking = [
        f"{r['rule']}[{r.get('fact', '')}]"
        for r in decision["reasons"]
        if r["effect"] in ("deny", "review") and "waived_by" not in r
    ]
    assert decision["verdict"] in want, (case["why"], blocking)
    if decision["verdict"] == "allow":
        # an allow never moves data a blocking residency reason holds back
        assert decision["data_may_move"] is True


def test_the_case_set_covers_every_jurisdiction_and_class() -> None:
    origins = {c.get("spec", {}).get("data", {}).get("origin", "SG") for c in DOC["cases"]}
    classes = {
        c.get("spec", {}).get("data", {}).get("classification", "internal") for c in DOC["cases"]
    }
    from policy_helpers import POLICIES

    from burst.policy import load_policies

    ps = load_policies(POLICIES)
    assert set(ps.jurisdictions.jurisdictions) <= origins
    assert set(ps.data_classes.data_classes) - {"public"} <= classes
    assert len(DOC["cases"]) >= 80
