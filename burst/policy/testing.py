"""Run the policies' own Rego unit tests (``policies/rules/*_test.rego``, rules ``test_*``)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass

from burst.policy.engine import Engine
from burst.policy.loader import PolicyFileError, PolicySet, _display

log = logging.getLogger(__name__)

PACKAGE = re.compile(r"^package\s+([A-Za-z_][\w.]*)\s*$", re.M)
TEST_RULE = re.compile(r"^(test_\w+)\s+(?:if\b|\{|:=\s*true)", re.M)


@dataclass(frozen=True)
class TestResult:
    file: str
    name: str
    passed: bool
    detail: str = ""


def run_policy_tests(policies: PolicySet, match: str | None = None) -> list[TestResult]:
    """Evaluate every ``test_*`` rule of every ``*_test.rego``; a test passes when it is true."""
    if not policies.test_modules:
        raise PolicyFileError("no Rego tests (*_test.rego) found",
                              where=_display(policies.root / "rules"))
    engine = Engine(policies, with_tests=True)
    results: list[TestResult] = []
    for module in policies.test_modules:
        pkg = PACKAGE.search(module.text)
        if pkg is None:
            raise PolicyFileError("no package line", where=_display(module.path))
        names = list(dict.fromkeys(TEST_RULE.findall(module.text)))
        if not names:
            raise PolicyFileError("no test_* rules", where=_display(module.path))
        for name in names:
            if match and match not in name:
                continue
            try:
                value = engine.query(f"data.{pkg.group(1)}.{name}")
            except PolicyFileError as exc:
                results.append(TestResult(module.path.name, name, False, exc.message))
                continue
            passed = value is True
            detail = "" if passed else ("undefined" if value is None else f"got {value!r}")
            results.append(TestResult(module.path.name, name, passed, detail))
            log.debug("policy test %s %s: %s", module.path.name, name, passed)
    return results
