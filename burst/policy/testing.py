"""The policies' own unit tests, run by ``burst policy test``.

Two kinds, both in the policy directory:

* ``tests/*.yaml``: decision cases. Each case gives a candidate, spec fields (merged over the
  file's ``base``), optionally facts and exceptions that replace the shipped ones, and what
  the decision must be: ``expect`` (verdict), ``rules`` (must appear), ``absent`` (must not).
  They run on the compiled rules with ``input`` set directly.
* ``rules/*_test.rego``: Rego ``test_*`` rules for helper functions; a test passes when true.
  Do not use ``with`` in them: rego-cpp 1.5 takes ~50-100 s for one ``with input.x as``
  against these rules (and crashes on ``with input as {...}``), which is why the decision
  cases are YAML.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from burst.policy.engine import Engine
from burst.policy.loader import PolicyFileError, PolicySet, _display, _read_yaml
from burst.policy.models import PolicyException

log = logging.getLogger(__name__)

PACKAGE = re.compile(r"^package\s+([A-Za-z_][\w.]*)\s*$", re.M)
TEST_RULE = re.compile(r"^(test_\w+)\s+(?:if\b|\{|:=\s*true)", re.M)
TESTS_DIR = "tests"


@dataclass(frozen=True)
class TestResult:
    file: str
    name: str
    passed: bool
    detail: str = ""


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    name: str = Field(min_length=1)
    candidate: str = Field(pattern=r"^[a-z0-9-]+/[a-z0-9-]+$", description="provider/region")
    spec: dict[str, Any] = Field(default_factory=dict)
    today: dt.date | None = None
    max_fact_age_days: int | None = Field(default=None, ge=1)
    facts: dict[str, Any] | None = None
    exceptions: list[PolicyException] | None = None
    expect: Literal["allow", "review", "deny"]
    rules: list[str] = Field(default_factory=list)
    absent: list[str] = Field(default_factory=list)
    cites: list[str] = Field(
        default_factory=list, description="Fact ids some reason must cite (waived or not)."
    )
    satisfied: list[str] = Field(
        default_factory=list, description="Rules the decision must list as satisfied."
    )
    may_move: bool | None = Field(default=None, description="The expected data_may_move.")


class CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    base: dict[str, Any]
    cases: list[Case] = Field(min_length=1)


def _merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _merge(base.get(k), v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def _load_cases(path: Path) -> CaseFile:
    data, _ = _read_yaml(path)
    try:
        return CaseFile.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = list(err["loc"])
        entry = "(file)"
        if len(loc) >= 2 and loc[0] == "cases" and isinstance(loc[1], int):
            items = data.get("cases") or []
            entry = (
                str(items[loc[1]].get("name", f"#{loc[1] + 1}"))
                if loc[1] < len(items) and isinstance(items[loc[1]], dict)
                else f"#{loc[1] + 1}"
            )
            loc = loc[2:]
        field = ".".join(str(p) for p in loc) or "(entry)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        raise PolicyFileError(
            f"entry {entry}: field {field}: {msg}", where=_display(path)
        ) from None


def _input(case: Case, base: dict[str, Any], policies: PolicySet) -> dict[str, Any]:
    today = case.today or dt.date.fromisoformat(str(base.get("today", dt.date.today())))
    max_age = case.max_fact_age_days or policies.settings.max_fact_age_days
    provider, region = case.candidate.split("/", 1)
    return {
        "today": today.isoformat(),
        "stale_before": (today - dt.timedelta(days=max_age)).isoformat(),
        "spec": _merge(base.get("spec", {}), case.spec),
        "candidate": {"region": region, "provider": provider},
    }


def _variant(policies: PolicySet, case: Case) -> dict[str, Any] | None:
    """The base document a case runs against: shipped facts with the case's overrides."""
    if case.facts is None and case.exceptions is None:
        return None
    doc = policies.data_document()
    facts = _merge(doc["facts"], case.facts or {})
    exceptions = doc["exceptions"]
    if case.exceptions is not None:
        exceptions = [e.model_dump(mode="json") for e in case.exceptions]
    return {"facts": facts, "exceptions": exceptions}


def check_case(decision: dict[str, Any], case: Case) -> str:
    """Empty when the decision is what the case expects, else what differs."""
    problems = []
    if decision["verdict"] != case.expect:
        problems.append(f"verdict {decision['verdict']}, expected {case.expect}")
    seen = {r["rule"] for r in decision["reasons"]}
    missing = [r for r in case.rules if r not in seen]
    if missing:
        problems.append(f"missing reasons {missing}")
    present = [r for r in case.absent if r in seen]
    if present:
        problems.append(f"unexpected reasons {present}")
    cited = {r.get("fact") for r in decision["reasons"]}
    uncited = [f for f in case.cites if f not in cited]
    if uncited:
        problems.append(f"no reason cites {uncited} (cited: {sorted(str(c) for c in cited)})")
    met = {s["rule"] for s in decision.get("satisfied", [])}
    unmet = [r for r in case.satisfied if r not in met]
    if unmet:
        problems.append(f"not listed as satisfied {unmet}")
    if case.may_move is not None and decision.get("data_may_move") != case.may_move:
        problems.append(f"data_may_move {decision.get('data_may_move')}, expected {case.may_move}")
    if problems:
        problems.append(f"got {sorted(seen)}")
    return "; ".join(problems)


def run_case_files(policies: PolicySet, match: str | None = None) -> list[TestResult]:
    results: list[TestResult] = []
    tests_dir = policies.root / TESTS_DIR
    files = sorted(tests_dir.glob("*.yaml")) if tests_dir.is_dir() else []
    shipped = Engine.shared(policies)
    for path in files:
        cf = _load_cases(path)
        for case in cf.cases:
            if match and match not in case.name:
                continue
            variant = _variant(policies, case)
            engine = shipped if variant is None else Engine.shared(policies, data=variant)
            decision = engine.evaluate(_input(case, cf.base, policies))
            problem = check_case(decision, case)
            results.append(TestResult(path.name, case.name, not problem, problem))
    return results


def run_rego_tests(policies: PolicySet, match: str | None = None) -> list[TestResult]:
    results: list[TestResult] = []
    if not policies.test_modules:
        return results
    engine = Engine(policies, with_tests=True)
    for module in policies.test_modules:
        pkg = PACKAGE.search(module.text)
        if pkg is None:
            raise PolicyFileError("no package line", where=_display(module.path))
        for name in dict.fromkeys(TEST_RULE.findall(module.text)):
            if match and match not in name:
                continue
            try:
                value = engine.query(f"data.{pkg.group(1)}.{name}")
            except PolicyFileError as exc:
                results.append(TestResult(module.path.name, name, False, exc.message))
                continue
            detail = "" if value is True else ("undefined" if value is None else f"got {value!r}")
            results.append(TestResult(module.path.name, name, value is True, detail))
    return results


def run_policy_tests(policies: PolicySet, match: str | None = None) -> list[TestResult]:
    """Every test of the policy directory; raises PolicyFileError when there are none."""
    results = run_rego_tests(policies, match) + run_case_files(policies, match)
    if not results and not match:
        raise PolicyFileError(
            "no policy tests (tests/*.yaml cases or rules/*_test.rego) found",
            where=_display(policies.root),
        )
    return results
