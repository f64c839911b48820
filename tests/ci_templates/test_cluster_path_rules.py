"""Issue 28's rules of the CI templates (tests/ci_templates/ci_rules.py): each finds its
defect in the templates as they were (tests/deploy/before) and none in the shipped ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from ci_rules import (
    credential_problems,
    install_problems,
    resolve_gitlab,
    run_deadline_problems,
    time_limit_problems,
)

from burst.pipelines.burst_train import WORKFLOW_DEADLINE_S

REPO = Path(__file__).resolve().parents[2]
BEFORE = REPO / "tests" / "deploy" / "before"
NAMESPACE = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())["namespace"]


def _gh(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text())  # type: ignore[no-any-return]


def _gl_jobs(path: Path) -> dict[str, dict[str, Any]]:
    return resolve_gitlab(yaml.safe_load(path.read_text()))


def _problems(gh: Path, gl: Path) -> dict[str, list[str]]:
    doc = _gh(gh)
    return {
        "installs": install_problems(doc["jobs"], NAMESPACE)
        + install_problems(_gl_jobs(gl), NAMESPACE),
        "time-limits": time_limit_problems(doc),
        "credentials": credential_problems(doc),
        "run-deadline": run_deadline_problems(doc, "github", WORKFLOW_DEADLINE_S)
        + run_deadline_problems(yaml.safe_load(gl.read_text()), "gitlab", WORKFLOW_DEADLINE_S),
    }


def test_before_issue_28_each_rule_finds_its_defect() -> None:
    found = _problems(BEFORE / "ci_github_burst.yml", BEFORE / "ci_gitlab_burst.gitlab-ci.yml")
    for rule, problems in found.items():
        assert problems, rule
    text = " ".join(found["installs"])
    assert "torch" in text and "ARGO_NAMESPACE" in text and "AWS CLI" in text


def test_the_shipped_templates_pass() -> None:
    found = _problems(
        REPO / "ci" / "github" / "burst.yml", REPO / "ci" / "gitlab" / "burst.gitlab-ci.yml"
    )
    assert all(v == [] for v in found.values()), found


def test_the_roles_session_is_documented_long_enough() -> None:
    """STS refuses a session longer than the role's MaxSessionDuration: docs/ci.md must ask
    for at least the longest role-duration-seconds a template requests."""
    import re

    text = (REPO / "ci" / "github" / "burst.yml").read_text()
    longest = max(int(x) for x in re.findall(r"role-duration-seconds:\s*(\d+)", text))
    doc = (REPO / "docs" / "ci.md").read_text()
    stated = [int(x) for x in re.findall(r"MaxSessionDuration` (\d+)", doc)]
    assert stated and max(stated) >= longest
