"""`burst report` of a submitted run reads it from the Argo server (the CI templates' report
step: ARGO_SERVER set, no local run). Each step's document is its pod's output parameter, the
spec the workflow's parameter, and the one report builder makes the report: a run's report
from Argo says what the same run's local report says.

The workflow is the one a real local quickstart run would be on Argo: its documents as the
pods' outputs, served by a loopback fake of the Argo server (pytest-httpserver). Before: `burst
report RUN` of a submitted run ended with "run RUN not found" (exit 2)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer

from burst import checkout

pytestmark = pytest.mark.e2e
Cli = Callable[..., subprocess.CompletedProcess[str]]
RUN = "argo-quick-1"


def _outputs_of(template: str) -> str:
    """The output parameter a step template's pod writes its document to."""
    manifest = yaml.safe_load((checkout.COMPILED / "burst-train.yaml").read_text())
    (t,) = [t for t in manifest["spec"]["templates"] if t["name"] == template]
    (p,) = [
        p for p in t["outputs"]["parameters"]
        if str(p["valueFrom"]["path"]).startswith("/tmp/outputs/")
    ]  # fmt: skip
    return str(p["name"])


def _workflow(run_dir: Path, phase: str, message: str, train: dict[str, Any]) -> dict[str, Any]:
    nodes = []
    for i, step in enumerate(("preflight", "plan", "verify-image", "provision", "train")):
        nodes.append({
            "id": f"n{i}", "name": f"{RUN}.{step}", "displayName": step, "type": "Pod",
            "templateName": step, "phase": "Succeeded",
            "startedAt": f"2026-01-01T00:0{i}:00Z", "finishedAt": f"2026-01-01T00:0{i}:30Z",
            "outputs": {
                "exitCode": "0",
                "parameters": [{
                    "name": _outputs_of(step),
                    "value": (run_dir / "docs" / f"{step}.json").read_text(),
                }],
            },
        })  # fmt: skip
    nodes[-1].update(train)
    nodes.append({
        "id": "n9", "name": f"{RUN}.onExit", "displayName": "teardown", "type": "Pod",
        "templateName": "teardown", "phase": "Succeeded",
        "startedAt": "2026-01-01T00:09:00Z", "finishedAt": "2026-01-01T00:09:20Z",
        "outputs": {"exitCode": "0", "parameters": [{
            "name": _outputs_of("teardown"),
            "value": (run_dir / "docs" / "teardown.json").read_text(),
        }]},
    })  # fmt: skip
    return {
        "metadata": {"name": RUN, "namespace": "ml"},
        "spec": {
            "workflowTemplateRef": {"name": "burst-train"},
            "arguments": {"parameters": [
                {"name": "spec", "value": (run_dir / "spec.yaml").read_text()},
            ]},
        },
        "status": {"phase": phase, "message": message, "nodes": {n["id"]: n for n in nodes}},
    }  # fmt: skip


@pytest.fixture
def local_run(burst_cli: Cli, quickstart_in: Path, tmp_path: Path) -> dict[str, Any]:
    root = tmp_path / "local"
    proc = burst_cli(["run", str(quickstart_in), "--run-id", RUN, "--runs-root", str(root)])
    assert proc.returncode == 0, proc.stderr[-2000:]
    report: dict[str, Any] = json.loads((root / RUN / "report.json").read_text())
    report["dir"] = str(root / RUN)
    return report


def test_a_submitted_runs_report_is_read_from_argo_and_says_what_the_local_one_says(
    local_run: dict[str, Any], argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    wf = _workflow(Path(local_run["dir"]), "Succeeded", "", {})
    argo_server.expect_request(f"/api/v1/workflows/ml/{RUN}", method="GET").respond_with_json(wf)
    root, html = tmp_path / "ci-job" / "runs", tmp_path / "ci-job" / "report.html"
    proc = burst_cli(["report", RUN, "--runs-root", str(root), "--json", "--html", str(html)])
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)
    assert got["status"] == local_run["status"] == "succeeded"
    report = json.loads((root / RUN / "report.json").read_text())
    for key in ("final_step", "checkpoints", "final_weights_sha256", "preemptions", "world_size"):
        assert report[key] == local_run[key], key
    assert [(s["name"], s["status"]) for s in report["steps"]] == [
        (s["name"], s["status"]) for s in local_run["steps"]
    ]
    assert report["candidate"] == local_run["candidate"]
    assert report["workflow"]["phase"] == "Succeeded"
    assert html.read_text().startswith("<!DOCTYPE html>") or "<html" in html.read_text()
    # the text report, as the template's summary step prints it
    text = burst_cli(["report", RUN, "--runs-root", str(root)])
    assert text.returncode == 0 and "succeeded" in text.stdout, text.stdout


def test_a_preempted_submitted_run_reads_as_preempted(
    local_run: dict[str, Any], argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    train = {"phase": "Failed", "outputs": {"exitCode": "75", "parameters": []}}
    wf = _workflow(Path(local_run["dir"]), "Failed", "child 'x' failed", train)
    argo_server.expect_request(f"/api/v1/workflows/ml/{RUN}", method="GET").respond_with_json(wf)
    proc = burst_cli(["report", RUN, "--runs-root", str(tmp_path / "r"), "--json"])
    assert json.loads(proc.stdout)["status"] == "preempted", proc.stdout


def test_a_running_workflow_has_no_report_yet_in_one_line(
    local_run: dict[str, Any], argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    wf = _workflow(Path(local_run["dir"]), "Running", "", {"phase": "Running"})
    argo_server.expect_request(f"/api/v1/workflows/ml/{RUN}", method="GET").respond_with_json(wf)
    proc = burst_cli(["report", RUN, "--runs-root", str(tmp_path / "r")])
    assert proc.returncode == 2, proc.stdout
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst")]  # not the fake's
    assert len(said) == 1 and "is running" in said[0] and "burst status" in said[0], said
    assert not (tmp_path / "r" / RUN).exists()  # nothing written for a run still going
