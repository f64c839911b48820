"""One submitted run, one ending (issue 46): `burst status`, `burst runs --argo` and `burst
report` of the same Argo workflow say the same status and exit code (docs/reference/endings.md).
The workflow is served by the loopback fake Argo server (pytest-httpserver). Before: `burst
report` built its step records without their pods' messages and train's attempt outcome, so a
train pod lost with its node (no exit code, "pod deleted") was `lost`, exit 137, in `burst
status` and `failed`, exit 1, in the report a CI job's report step prints."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from pytest_httpserver import HTTPServer

Cli = Callable[..., subprocess.CompletedProcess[str]]
RUN = "wf-ends-1"
T = [f"2026-01-01T00:0{i}:00Z" for i in range(10)]


def _node(i: int, step: str, phase: str, code: str | None, message: str = "") -> dict[str, Any]:
    node: dict[str, Any] = {
        "id": f"n{i}", "name": f"{RUN}.{step}", "displayName": step, "type": "Pod",
        "templateName": step, "phase": phase, "message": message,
        "startedAt": T[i], "finishedAt": T[i + 1],
    }  # fmt: skip
    if code is not None:
        node["outputs"] = {"exitCode": code}
    return node


def _workflow(phase: str, message: str, train: list[dict[str, Any]]) -> dict[str, Any]:
    nodes = [_node(0, "preflight", "Succeeded", "0"), _node(1, "provision", "Succeeded", "0")]
    nodes += [*train, _node(8, "teardown", "Succeeded", "0")]
    return {
        "metadata": {"name": RUN, "namespace": "ml"},
        "spec": {"workflowTemplateRef": {"name": "burst-train"}},
        "status": {
            "phase": phase, "message": message, "startedAt": T[0], "finishedAt": T[9],
            "nodes": {n["id"]: n for n in nodes},
        },
    }  # fmt: skip


CASES: dict[str, tuple[str, str, list[dict[str, Any]], int]] = {
    "lost": (
        "Failed", "child failed",
        [_node(2, "train", "Error", None, "pod deleted"), _node(3, "give-up", "Failed", "1")],
        137,
    ),
    "cancelled": ("Failed", "Stopped with strategy 'Stop'", [_node(2, "train", "Failed", "75")], 130),
    "preempted": (
        "Failed", "child failed",
        [_node(2, "train", "Failed", "75"), _node(3, "give-up", "Failed", "75")],
        75,
    ),
    "budget-stopped": (
        "Failed", "child failed",
        [_node(2, "train", "Failed", "3"), _node(3, "give-up", "Failed", "3")],
        3,
    ),
    "failed": ("Failed", "child failed", [_node(2, "train", "Failed", "4")], 4),
    "succeeded": ("Succeeded", "", [_node(2, "train", "Succeeded", "0")], 0),
}  # fmt: skip


@pytest.mark.parametrize("ending", list(CASES))
def test_status_runs_and_report_of_an_argo_run_agree(
    ending: str, argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    phase, message, train, code = CASES[ending]
    wf = _workflow(phase, message, train)
    argo_server.expect_request(f"/api/v1/workflows/ml/{RUN}", method="GET").respond_with_json(wf)
    argo_server.expect_request("/api/v1/workflows/ml", method="GET").respond_with_json(
        {"metadata": {}, "items": [wf]}
    )
    root = tmp_path / "runs"
    status = json.loads(burst_cli(["status", RUN, "--runs-root", str(root), "--json"]).stdout)
    assert (status["status"], status["exit_code"]) == (ending, code), status
    rows = json.loads(burst_cli(["runs", "--argo", "--runs-root", str(root), "--json"]).stdout)
    (row,) = [r for r in rows if r["run_id"] == RUN]
    assert (row["status"], row["exit_code"]) == (ending, code), row
    proc = burst_cli(["report", RUN, "--runs-root", str(root), "--json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert (report["status"], report["exit_code"]) == (ending, code), report
    text = burst_cli(["report", RUN, "--runs-root", str(root)]).stdout
    assert f"{ending} (exit {code}): " in text, text


def test_a_stopped_argo_run_counts_its_cancel_as_no_preemption(
    argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path
) -> None:
    """`argo stop` (burst cancel, a CI cancel) while train runs: train saves on the stop's
    notice and exits 75, its record says preempted. The report of the submitted run calls that
    attempt a cancel and counts no preemption, as the local run's report does (before: the
    Argo report counted one preemption for a cancelled run)."""
    import yaml

    from burst import checkout
    from burst.documents.train import TrainAttempt, TrainDocument

    manifest = yaml.safe_load((checkout.COMPILED / "burst-train.yaml").read_text())
    (t,) = [t for t in manifest["spec"]["templates"] if t["name"] == "train"]
    (param,) = [
        p["name"] for p in t["outputs"]["parameters"]
        if str(p["valueFrom"]["path"]).startswith("/tmp/outputs/")
    ]  # fmt: skip
    doc = TrainDocument(
        step="train", run_id=RUN, preemptions=1, exit_code=75,
        attempts=[TrainAttempt(attempt=1, preempted=True, outcome="preempted", ended_at_step=7)],
    ).to_json()  # fmt: skip
    train = _node(2, "train", "Failed", "75", "Stopped with strategy 'Stop'")
    train["outputs"]["parameters"] = [{"name": param, "value": json.dumps(doc)}]
    wf = _workflow("Failed", "Stopped with strategy 'Stop'", [train])
    argo_server.expect_request(f"/api/v1/workflows/ml/{RUN}", method="GET").respond_with_json(wf)
    proc = burst_cli(["report", RUN, "--runs-root", str(tmp_path / "runs"), "--json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "runs" / RUN / "report.json").read_text())
    assert (report["status"], report["exit_code"], report["preemptions"]) == ("cancelled", 130, 0)
    assert report["attempts"][-1]["outcome"] == "cancelled"
    assert report["attempts"][-1]["recovery_source"] == "cancel"
