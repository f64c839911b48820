"""The CI follow loop losing its token, and the end-of-job decision (`burst finish`).

Against a fake Argo server (pytest-httpserver on loopback: a stand-in, since no Argo server
can run here) whose tokens expire like `aws eks get-token`'s: after a few requests the old
token is refused with 401, as Argo's server answers an expired bearer token. The workflow
keeps running all along. What must hold: the follow loop renews the token and follows to
the end; without a way to renew it says it cannot follow (exit 4, not "failed"); and the
CI job's end never tears down while the workflow runs, and stops it (`argo stop`, so its
exit handler tears down) only when the CI job was cancelled.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

from tests.conftest import BurstCli

NAME = "quickstart-x7k2p"
PATH = f"/api/v1/workflows/ml/{NAME}"


class FakeArgo:
    """A workflow that runs for ``running_polls`` GETs, then ends in ``final``; the token
    ``old`` is accepted ``old_valid`` times, then refused (expired); ``fresh`` always works."""

    def __init__(self, running_polls: int, old_valid: int, final: str = "Succeeded") -> None:
        self.running_polls = running_polls
        self.old_valid = old_valid
        self.final = final
        self.polls = 0
        self.refused = 0
        self.stops: list[dict[str, Any]] = []
        self.phase = "Running"

    def _authorized(self, request: Request) -> bool:
        auth = request.headers.get("Authorization", "")
        if auth == "Bearer fresh":
            return True
        if auth == "Bearer old" and self.old_valid > 0:
            self.old_valid -= 1
            return True
        self.refused += 1
        return False

    def get(self, request: Request) -> Response:
        if not self._authorized(request):
            return Response(
                json.dumps({"code": 16, "message": "token expired"}),
                status=401,
                content_type="application/json",
            )
        self.polls += 1
        if self.phase == "Running" and self.polls > self.running_polls:
            self.phase = self.final
        body = {
            "metadata": {"name": NAME},
            "spec": {"workflowTemplateRef": {"name": "burst-train"}},
            "status": {"phase": self.phase, "progress": "4/6", "nodes": {}},
        }
        return Response(json.dumps(body), content_type="application/json")

    def stop(self, request: Request) -> Response:
        if not self._authorized(request):
            return Response("{}", status=401, content_type="application/json")
        self.stops.append(request.get_json())
        self.phase = "Failed"  # stopped: the exit handler ran, the workflow failed
        body = {"metadata": {"name": NAME}, "spec": {}, "status": {"phase": "Running"}}
        return Response(json.dumps(body), content_type="application/json")


@pytest.fixture
def argo(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> HTTPServer:
    monkeypatch.setenv("ARGO_SERVER", httpserver.url_for("/"))
    monkeypatch.setenv("ARGO_TOKEN", "Bearer old")
    monkeypatch.setenv("ARGO_NAMESPACE", "ml")
    return httpserver


def serve(server: HTTPServer, fake: FakeArgo) -> None:
    server.expect_request(PATH, method="GET").respond_with_handler(fake.get)
    server.expect_request(f"{PATH}/stop", method="PUT").respond_with_handler(fake.stop)


def burst(burst_cmd: list[str], *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*burst_cmd, *args], capture_output=True, text=True, check=False, timeout=120, cwd=cwd
    )


TOKEN_COMMAND = f"{sys.executable} -c \"print('fresh')\""


@pytest.mark.e2e
def test_follow_renews_an_expired_token_and_follows_to_the_end(
    argo: HTTPServer, burst_cmd: list[str], tmp_path: Path
) -> None:
    fake = FakeArgo(running_polls=4, old_valid=2)
    serve(argo, fake)
    proc = burst(
        burst_cmd,
        "status", NAME, "--follow", "--interval", "0.1", "--token-command", TOKEN_COMMAND,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert fake.refused == 1  # the old token expired once, the fresh one was used after
    assert f"{NAME}: Succeeded" in proc.stdout
    assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_follow_that_cannot_renew_says_so_and_the_end_of_the_job_leaves_the_run_alone(
    argo: HTTPServer, burst_cmd: list[str], tmp_path: Path
) -> None:
    """The old CI: the token expired, `burst status --follow` gave up, and the `always()`
    teardown destroyed the infrastructure of a workflow still training. Now the follow loop
    exits 4 ("may still be running"), and `burst finish` (the job's always() step), with the
    workflow Running, tears nothing down and stops nothing."""
    fake = FakeArgo(running_polls=10_000, old_valid=2)
    serve(argo, fake)
    proc = burst(burst_cmd, "status", NAME, "--follow", "--interval", "0.1", cwd=tmp_path)
    assert proc.returncode == 4, proc.stderr
    assert "may still be running" in proc.stderr or "refused" in proc.stderr
    assert "Traceback" not in proc.stderr

    spec = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    proc = burst(
        burst_cmd,
        "finish", NAME, "--spec", str(spec), "--token-command", TOKEN_COMMAND,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 4, proc.stderr
    assert f"{NAME}: leave" in proc.stdout
    assert "not tearing down" in proc.stderr
    assert not (tmp_path / "teardown.json").exists()  # teardown never ran
    assert fake.stops == [] and fake.phase == "Running"


@pytest.mark.e2e
def test_a_cancelled_ci_job_stops_the_workflow_instead_of_destroying(
    argo: HTTPServer, burst_cmd: list[str], tmp_path: Path
) -> None:
    fake = FakeArgo(running_polls=10_000, old_valid=0)  # the old token has expired already
    serve(argo, fake)
    spec = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    proc = burst(
        burst_cmd,
        "finish", NAME, "--spec", str(spec), "--cancelled", "--token-command", TOKEN_COMMAND,
        cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{NAME}: stopped" in proc.stdout
    (stop,) = fake.stops
    assert stop["name"] == NAME and "cancelled" in stop["message"]
    assert not (tmp_path / "teardown.json").exists()  # the exit handler tears down, not CI


def test_the_end_of_the_job_tears_down_once_the_workflow_finished(
    argo: HTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from burst.runner.argo import settings_from_env
    from burst.runner.follow import Follower, TokenSource, finish

    fake = FakeArgo(running_polls=0, old_valid=10, final="Failed")
    serve(argo, fake)
    follower = Follower(NAME, settings_from_env(), TokenSource(None), sleep=lambda _s: None)
    assert finish(follower, cancelled=False) == "teardown"
    assert fake.stops == []


def test_argo_unreachable_is_ridden_out_then_reported_as_infrastructure(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A server that stays unreachable: the follower retries for max_outage_s (a virtual
    clock here), then raises InfraError; finish() then leaves everything alone."""
    from burst.errors import InfraError
    from burst.runner.argo import ArgoSettings
    from burst.runner.follow import Follower, TokenSource, finish

    now = [0.0]

    def sleep(s: float) -> None:
        now[0] += s

    settings = ArgoSettings("http://127.0.0.1:9/", "Bearer old", "ml", True)  # discard port
    follower = Follower(
        NAME, settings, TokenSource(None), max_outage_s=60, interval_s=20,
        sleep=sleep, clock=lambda: now[0],
    )  # fmt: skip
    with pytest.raises(InfraError, match="may still be running"):
        follower.state()
    assert now[0] >= 60
    assert finish(follower, cancelled=True) == "leave"


# -- the end of a CI job in a fresh shell: no ARGO_TOKEN (audit "CI cancel and protected
# environments"). GitLab's after_script, and the burst:teardown job, never see the token that
# the job's script exported: --token-command gives the first one.


def test_finish_without_argo_token_gets_one_from_the_token_command(
    argo: HTTPServer, monkeypatch: pytest.MonkeyPatch, burst_cli: BurstCli
) -> None:
    """Before: `ARGO_TOKEN is not set` (exit 2) before Argo was asked, so a cancelled GitLab
    job's after_script never stopped its workflow."""
    monkeypatch.delenv("ARGO_TOKEN")
    fake = FakeArgo(running_polls=10_000, old_valid=0)
    serve(argo, fake)
    spec = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
    proc = burst_cli(
        ["finish", NAME, "--spec", str(spec), "--cancelled", "--wait", "0",
         "--token-command", TOKEN_COMMAND],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert f"{NAME}: stopped" in proc.stdout
    assert len(fake.stops) == 1 and fake.refused == 0  # the first token was the fresh one


def test_status_and_cancel_without_argo_token_use_the_token_command(
    argo: HTTPServer, monkeypatch: pytest.MonkeyPatch, burst_cli: BurstCli
) -> None:
    monkeypatch.delenv("ARGO_TOKEN")
    fake = FakeArgo(running_polls=10_000, old_valid=0)
    serve(argo, fake)
    proc = burst_cli(["status", NAME, "--token-command", TOKEN_COMMAND])
    assert proc.returncode == 0 and f"{NAME}: Running" in proc.stdout, proc.stderr
    proc = burst_cli(
        ["cancel", NAME, "--token-command", TOKEN_COMMAND, "--runs-root", "/nonexistent"]
    )
    assert proc.returncode == 0, proc.stderr
    assert len(fake.stops) == 1
    # without a way to get one, the message still says what is missing (exit 2)
    proc = burst_cli(["status", NAME])
    assert proc.returncode == 2 and "ARGO_TOKEN is not set" in proc.stderr


def _gitlab_variables(job: dict[str, Any], overrides: dict[str, str]) -> dict[str, str]:
    """The job's variables as the runner hands them to a shell: the template's, then the
    project's CI/CD variables (higher precedence), with $VAR references expanded."""
    raw = {k: str(v) for k, v in (job.get("variables") or {}).items()}
    raw.update(overrides)
    ref = re.compile(r"\$\{?(\w+)\}?")

    def expand(values: dict[str, str]) -> dict[str, str]:
        return {k: ref.sub(lambda m: values.get(m.group(1), ""), v) for k, v in values.items()}

    for _ in range(5):
        raw = expand(raw)
    return raw


@pytest.mark.e2e
@pytest.mark.parametrize("status", ["canceled", "failed", "timedout"])
def test_gitlab_after_script_of_the_submit_job_in_a_fresh_shell(
    argo: HTTPServer, burst_cmd: list[str], tmp_path: Path, status: str
) -> None:
    """The submit job's after_script, run as GitLab Runner runs it: a new bash with the job's
    variables only (no ARGO_TOKEN: the script's export is gone), in the project directory,
    CI_JOB_STATUS set. Cancelled: the workflow gets `argo stop`. Failed or timed out: a
    running workflow is left alone. Before: `burst finish` exited 2 (ARGO_TOKEN is not set)
    and the cancelled job's workflow went on training."""
    sys.path.insert(0, str(Path(__file__).parent))
    from ci_rules import flat, resolve_gitlab

    repo = Path(__file__).resolve().parents[2]
    job = resolve_gitlab(yaml.safe_load((repo / "ci/gitlab/burst.gitlab-ci.yml").read_text()))[
        "burst:submit"
    ]
    fake = FakeArgo(running_polls=10_000, old_valid=0)
    serve(argo, fake)
    project = tmp_path / "project"
    (project / "examples").mkdir(parents=True)
    shutil.copy(repo / "examples" / "quickstart.yaml", project / "examples")
    (project / "burst.env").write_text(f"BURST_RUN_ID={NAME}\nBURST_TF_STACK=aws\n")
    # what before_script installed into the project directory (kept between the shells)
    bin_dir = project / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    shims = {
        "burst": "exec " + " ".join(shlex.quote(w) for w in burst_cmd) + ' "$@"',
        "aws": 'case "$*" in "eks get-token"*) echo fresh ;; *) exit 3 ;; esac',
    }
    for name, body in shims.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    env = _gitlab_variables(
        job,
        {
            "CI_PROJECT_DIR": str(project), "CI_PROJECT_ID": "7", "CI_PIPELINE_ID": "9",
            "BURST_AWS_REGION": "ap-southeast-1", "BURST_EKS_CLUSTER": "gpu",
            "BURST_ARGO_SERVER": argo.url_for("/"), "ARGO_NAMESPACE": "ml",
            "BURST_ID_TOKEN": "id-token", "CI_JOB_STATUS": status,
        },
    )  # fmt: skip
    env.update(PATH=os.environ["PATH"], HOME=str(tmp_path))
    assert "ARGO_TOKEN" not in env
    script = "\n".join(flat(job["after_script"]))
    proc = subprocess.run(
        ["bash", "-c", "set -eo pipefail\n" + script], cwd=project, env=env,
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    if status == "canceled":
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert f"{NAME}: stopped" in proc.stdout
        assert len(fake.stops) == 1
    else:
        assert f"{NAME}: leave" in proc.stdout, proc.stdout + proc.stderr
        assert fake.stops == [] and fake.phase == "Running"
    assert (project / ".burst-id-token").read_text() == "id-token"
