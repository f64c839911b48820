"""`burst cancel RUN` (issue 29): one command for a local run and an Argo run; the run stops as
`argo stop` stops it and its teardown still runs. Local: a real `burst run` stopped mid-way.
Argo: the loopback fake server (pytest-httpserver) receives the stop request."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from pytest_httpserver import HTTPServer


def _burst(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*burst_cmd, *args], capture_output=True, text=True, timeout=300)


@pytest.mark.e2e
def test_cancel_a_local_run_tears_it_down(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    run_id = f"cancel-{uuid.uuid4().hex[:8]}"
    err = tmp_path / "stderr"
    with err.open("w") as fh:
        runner = subprocess.Popen(
            [*burst_cmd, "run", str(quickstart_in), "--runs-root", str(root), "--run-id", run_id],
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
        )
        for _ in range(600):  # poll with a bound: until provision starts
            if "… provision" in err.read_text() or runner.poll() is not None:
                break
            time.sleep(0.2)
        proc = _burst(burst_cmd, "cancel", run_id, "--runs-root", str(root), "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["mode"] == "local"
        runner.communicate(timeout=300)
    report = json.loads((root / run_id / "report.json").read_text())
    assert report["workflow"]["message"].startswith("stopped by signal 15")
    teardown = next(s for s in report["steps"] if s["name"] == "teardown")
    assert teardown["status"] == "succeeded" and report["resources_remaining"] == 0
    # nothing left to stop: refused in one line
    again = _burst(burst_cmd, "cancel", run_id, "--runs-root", str(root))
    assert again.returncode == 3 and "no live runner" in again.stderr


def test_cancel_an_argo_run_stops_its_workflow(
    httpserver: HTTPServer, burst_cmd: list[str], tmp_path: Path
) -> None:
    httpserver.expect_request("/api/v1/workflows/ml/wf-1/stop", method="PUT").respond_with_json(
        {"metadata": {"name": "wf-1"}, "spec": {}}
    )
    env = {"ARGO_SERVER": httpserver.url_for("/"), "ARGO_TOKEN": "t", "ARGO_NAMESPACE": "ml"}
    proc = subprocess.run(
        [*burst_cmd, "cancel", "wf-1", "--runs-root", str(tmp_path), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **env},
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {
        "action": "stop",
        "mode": "argo",
        "pid": None,
        "run_id": "wf-1",
    }
    body = json.loads(httpserver.log[0][0].get_data())
    assert body["name"] == "wf-1" and "burst cancel" in body["message"]
