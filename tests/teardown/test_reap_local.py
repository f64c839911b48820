"""The reaper's state path, with real Terraform state left behind by a run nobody tore down."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest

from burst.infra.terraform import count_state_resources

from .provisioning import provision_only

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def _reap(burst_cmd: list[str], runs_root: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(  # the environment (ARGO_* in one test) goes to the child
        [*burst_cmd, "reap", "--json", "--runs-root", str(runs_root), *args],
        capture_output=True,
        text=True,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_reap_destroys_expired_state_and_then_finds_nothing(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    # a run id of its own: the reaper counts any process on this machine naming the run id as
    # its live driver, so a fixed id would collide with another checkout's test run
    run_id = f"orphan-{uuid.uuid4().hex[:8]}"
    state = provision_only(quickstart_in, run_id, runs_root, "ap-southeast-1")
    assert count_state_resources(state) > 0

    # before the expiry: found, not touched, even with --yes
    code, doc = _reap(burst_cmd, runs_root, "--yes")
    assert code == 0
    assert [r["verdict"] for r in doc["runs"]] == ["active"]
    assert count_state_resources(state) > 0

    later = "2099-01-01T00:00:00Z"
    code, doc = _reap(burst_cmd, runs_root, "--now", later)  # dry run
    assert doc["dry_run"] is True and doc["actions"] == []
    assert doc["runs"][0]["verdict"] == "expired"
    assert count_state_resources(state) > 0

    code, doc = _reap(burst_cmd, runs_root, "--now", later, "--yes")
    assert code == 0
    assert doc["actions"][0]["action"] == "destroy-from-state"
    assert count_state_resources(state) == 0

    code, doc = _reap(burst_cmd, runs_root, "--now", later, "--yes")
    assert code == 0 and doc["runs"] == [] and doc["actions"] == []


def test_reap_bad_time_is_exit_2(runs_root: Path, burst_cmd: list[str]) -> None:
    proc = subprocess.run([*burst_cmd, "reap", "--now", "tomorrow"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert "--now 'tomorrow'" in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_whose_workflow_is_still_running_is_never_reaped(
    runs_root: Path,
    quickstart_in: Path,
    burst_cmd: list[str],
    httpserver,
    monkeypatch,  # type: ignore[no-untyped-def]
) -> None:
    """With ARGO_SERVER set, the reaper asks Argo (here a fake on loopback: pytest-httpserver)
    for the unfinished workflows; a run driven by one is "live" even past its expiry."""
    state = provision_only(quickstart_in, "wf-live", runs_root, "ap-southeast-1")
    monkeypatch.setenv("ARGO_SERVER", httpserver.url_for("/"))
    monkeypatch.setenv("ARGO_TOKEN", "t0k3n")
    monkeypatch.setenv("ARGO_NAMESPACE", "ml")
    httpserver.expect_request(
        "/api/v1/workflows/ml",
        query_string={"listOptions.labelSelector": "workflows.argoproj.io/completed!=true"},
    ).respond_with_json({"metadata": {}, "items": [{"metadata": {"name": "wf-live"}, "spec": {}}]})
    code, doc = _reap(burst_cmd, runs_root, "--yes", "--now", "2099-01-01T00:00:00Z")
    assert code == 0
    assert doc["argo"] == {"checked": True, "unfinished": ["wf-live"]}
    assert [(r["run_id"], r["verdict"]) for r in doc["runs"]] == [("wf-live", "live")]
    assert doc["actions"] == [] and count_state_resources(state) > 0

    httpserver.clear()  # Argo unreachable (say, the cluster is down): recorded, and expired
    monkeypatch.setenv("ARGO_SERVER", "http://127.0.0.1:9")  # runs are still reaped
    code, doc = _reap(burst_cmd, runs_root, "--yes", "--now", "2099-01-01T00:00:00Z")
    assert doc["argo"]["checked"] is False and "cannot reach" in doc["argo"]["error"]
    assert [a["action"] for a in doc["actions"]] == ["destroy-from-state"]
    assert count_state_resources(state) == 0
