"""`burst status RUN` (issue 29): one command for a local run and an Argo run, one-shot by
default (`--follow` to watch), the same `--json` shape for both, and fast bounded failure
against an Argo server that is not there (before: followed by default, retried 15 minutes, and
a local run was "ARGO_SERVER is not set"). The Argo server is pytest-httpserver on loopback (no
Argo server can run here)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_regional import RUN_ID as REGIONAL_ID
from obs_regional import make_regional_run
from obs_run import RUN_ID, make_run
from pytest_httpserver import HTTPServer

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_status_of_a_local_run_is_one_shot(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_run(root)
    proc = burst_cli(["status", RUN_ID, "--runs-root", str(root)], env={"ARGO_SERVER": ""})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == f"{RUN_ID}: succeeded"
    assert "  train: succeeded exit 0" in proc.stdout
    proc = burst_cli(["status", RUN_ID, "--runs-root", str(root), "--json"])
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "local" and doc["status"] == "succeeded" and doc["finished"]
    train = next(s for s in doc["steps"] if s["name"] == "train")
    assert train["attempts"] == 2  # preempted once, requeued


def test_status_of_a_local_regional_run(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_regional_run(root)
    proc = burst_cli(["status", REGIONAL_ID, "--runs-root", str(root), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["status"] == "succeeded"
    assert "regions(1:me-central-1).train" in {s["name"] for s in doc["steps"]}


def _workflow(phase: str) -> dict:  # type: ignore[type-arg]
    node = {
        "id": "t",
        "name": "wf-1.train",
        "displayName": "train",
        "type": "Pod",
        "phase": phase,
        "startedAt": "2026-01-01T00:01:00Z",
    }
    return {
        "metadata": {"name": "wf-1"},
        "spec": {"workflowTemplateRef": {"name": "burst-train"}},
        "status": {"phase": phase, "progress": "1/6", "nodes": {"t": node}},
    }


def test_status_of_an_argo_run_is_one_shot_with_the_same_json(
    argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    argo_server.expect_request("/api/v1/workflows/ml/wf-1", method="GET").respond_with_json(
        _workflow("Running")
    )
    proc = burst_cli(["status", "wf-1", "--runs-root", str(tmp_path), "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["mode"] == "argo" and doc["status"] == "running" and not doc["finished"]
    assert doc["phase"] == "Running" and doc["steps"][0]["name"] == "train"
    assert len(argo_server.log) == 1  # looked once: no following by default


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_status_against_an_unreachable_argo_server_fails_fast(
    burst_cmd: list[str], tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "ARGO_SERVER": f"http://127.0.0.1:{_closed_port()}",
        "ARGO_TOKEN": "t",
    }
    proc = subprocess.run(
        [*burst_cmd, "status", "wf-1", "--runs-root", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,  # a hang would be the bug; no retries without --follow
        env=env,
        check=False,
    )
    assert proc.returncode == 4, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "ARGO_SERVER" in lines[0] and "Traceback" not in proc.stderr


def test_status_of_no_such_run_without_argo(burst_cli: Cli, tmp_path: Path) -> None:
    proc = burst_cli(["status", "nope-1", "--runs-root", str(tmp_path)], env={"ARGO_SERVER": ""})
    assert proc.returncode == 2
    assert "not a local run under" in proc.stderr and "ARGO_SERVER" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_runs_lists_local_runs_and_argo_workflows(
    argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    make_run(root)
    argo_server.expect_request("/api/v1/workflows/ml", method="GET").respond_with_json(
        {
            "metadata": {},
            "items": [
                {
                    "metadata": {"name": "wf-1"},
                    "spec": {},
                    "status": {
                        "phase": "Succeeded",
                        "startedAt": "2026-01-01T00:00:00Z",
                        "finishedAt": "2026-01-01T00:10:00Z",
                    },
                }
            ],
        }
    )
    proc = burst_cli(["runs", "--runs-root", str(root), "--argo", "--json"])
    assert proc.returncode == 0, proc.stderr
    rows = {r["run_id"]: r for r in json.loads(proc.stdout)}
    assert rows[RUN_ID]["mode"] == "local" and rows[RUN_ID]["status"] == "succeeded"
    assert rows["wf-1"]["mode"] == "argo" and rows["wf-1"]["status"] == "succeeded"
    assert rows["wf-1"]["wall_seconds"] == 600.0
    text = burst_cli(["runs", "--runs-root", str(root), "--argo"])
    assert any(line.startswith("wf-1 ") and "(argo)" in line for line in text.stdout.splitlines())
