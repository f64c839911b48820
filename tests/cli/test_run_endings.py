"""What the commands say is what happened (issue 46), on real `burst run` processes.

A run cancelled with `burst cancel` ends cancelled: `burst run` exits 130 with the `burst
resume` line, as after Ctrl-C, and `status`, `runs`, `report` and report.json say cancelled
and count no preemption (before: exit 75, "preempted, requeue me", shown failed, one
preemption counted, no resume line). While it runs, its run id is on stdout already, `burst
status` shows the running train step (before: left out), `burst runs` counts wall time from
the clock (before: the finished steps added up), and `status --follow` never calls a train step
succeeded that exited 75 (before: "train: succeeded exit 0", from its document existing). A
runner killed with SIGKILL shows lost, exit 137 (before: running until `burst down`), then
reaped once `burst down` destroyed what it left."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e  # real `burst run` processes


def _burst(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*burst_cmd, *args], capture_output=True, text=True, timeout=300)


def _status(burst_cmd: list[str], run_id: str, root: Path) -> dict[str, Any]:
    proc = _burst(burst_cmd, "status", run_id, "--runs-root", str(root), "--json")
    assert proc.returncode in (0, 1), proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def _row(burst_cmd: list[str], run_id: str, root: Path) -> dict[str, Any]:
    proc = _burst(burst_cmd, "runs", "--runs-root", str(root), "--json")
    assert proc.returncode == 0, proc.stderr
    rows = [r for r in json.loads(proc.stdout) if r["run_id"] == run_id]
    assert len(rows) == 1
    return rows[0]


def test_a_cancelled_run_is_cancelled_everywhere(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "cancelled-1"
    env = {**os.environ, "BURST_STEP_PACE_S": "0.4"}  # train takes 12 s or more: time to look
    err = tmp_path / "stderr"
    with err.open("w") as fh:
        runner = subprocess.Popen(
            [*burst_cmd, "run", str(quickstart_in), "--runs-root", str(root), "--run-id", run_id],
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
            env=env,
        )
        try:
            assert runner.stdout is not None
            first = runner.stdout.readline()  # the run id, as soon as the run exists
            assert first == run_id + "\n" and runner.poll() is None
            train: dict[str, Any] = {}
            for _ in range(600):  # poll with a bound: until train has run a while
                st = _status(burst_cmd, run_id, root)
                train = next((s for s in st["steps"] if s["name"] == "train"), {})
                running = train.get("status") == "running" and train["seconds"] > 0
                if running or runner.poll() is not None:
                    break
                time.sleep(0.2)
            assert st["status"] == "running" and not st["finished"] and st["exit_code"] is None
            assert train["status"] == "running" and train["exit_code"] is None
            assert all(s["exit_code"] == 0 for s in st["steps"] if s["status"] == "succeeded")
            row = _row(burst_cmd, run_id, root)
            assert row["status"] == "running"
            # wall time from the clock: at least every step so far, the running one included
            assert row["wall_seconds"] >= sum(s["seconds"] for s in st["steps"])
            watch = ("--runs-root", str(root), "--follow", "--interval", "0.2")
            follow = subprocess.Popen(
                [*burst_cmd, "status", run_id, *watch],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            cancel = _burst(burst_cmd, "cancel", run_id, "--runs-root", str(root))
            assert cancel.returncode == 0, cancel.stderr
            runner.wait(timeout=300)
            out, _ = follow.communicate(timeout=300)
        finally:
            if runner.poll() is None:
                runner.kill()
    text = err.read_text()
    assert runner.returncode == 130, text[-3000:]
    assert f"burst resume {run_id} --runs-root {root}" in text
    assert "cancelled (exit 130)" in text and "next: burst report" in text
    lines = out.splitlines()
    assert "  train: succeeded exit 0" not in lines, out  # train exited as it was stopped
    assert f"{run_id}: cancelled" in lines and follow.returncode == 1
    st = _status(burst_cmd, run_id, root)
    assert (st["status"], st["exit_code"], st["finished"]) == ("cancelled", 130, True)
    assert f"burst resume {run_id} --runs-root {root}" in st["ending"]["hint"]
    row = _row(burst_cmd, run_id, root)
    assert (row["status"], row["exit_code"], row["preemptions"]) == ("cancelled", 130, 0)
    report = json.loads((root / run_id / "report.json").read_text())
    assert (report["status"], report["exit_code"], report["preemptions"]) == ("cancelled", 130, 0)
    assert report["attempts"][-1]["outcome"] == "cancelled"  # its notice was the stop
    # what ended it is a cancel, which spends no retry budget (issue 44)
    assert report["attempts"][-1]["recovery_source"] == "cancel"
    assert report["recovery_sources"] == {"cancel": 1}
    assert report["resources_remaining"] == 0
    shown = _burst(burst_cmd, "report", run_id, "--runs-root", str(root)).stdout
    assert "cancelled (exit 130): stopped on request" in shown and "preemptions 0" in shown


def test_a_killed_runner_is_lost_then_reaped(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "killed-1"
    proc = _burst(
        burst_cmd, "run", str(quickstart_in), "--runs-root", str(root), "--run-id", run_id,
        "--kill-runner-at", "train",
    )  # fmt: skip
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-3000:]
    assert proc.stdout == run_id + "\n"  # printed when the run began, not at an end it never had
    st = _status(burst_cmd, run_id, root)
    assert (st["status"], st["exit_code"], st["finished"]) == ("lost", 137, True)
    steps = {s["name"]: s for s in st["steps"]}
    assert steps["provision"]["status"] == "succeeded" and steps["train"]["status"] == "lost"
    text = _burst(burst_cmd, "status", run_id, "--runs-root", str(root))
    assert text.returncode == 1 and f"burst down {run_id} --runs-root {root}" in text.stdout
    assert _row(burst_cmd, run_id, root)["status"] == "lost"
    down = _burst(burst_cmd, "down", run_id, "--runs-root", str(root))
    assert down.returncode == 0, down.stderr
    st = _status(burst_cmd, run_id, root)
    assert (st["status"], st["exit_code"]) == ("reaped", 137)
