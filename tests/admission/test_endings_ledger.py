"""Ledger truth (issue 47): every ending settles its reservation, and `burst budget` is
balanced afterwards. Real `burst run` processes on the quickstart (its local ledger is
``<runs root>/ledger``): succeeded, failed, cancelled (SIGTERM to the runner), killed then
`burst down`, killed then `burst reap`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from burst.admission.ledger import Entry, Ledger

pytestmark = pytest.mark.e2e  # real `burst run` processes


def _burst(
    burst_cmd: list[str], *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*burst_cmd, *args], capture_output=True, text=True, timeout=300, env=env)


def _entry(root: Path, run_id: str) -> Entry:
    entry = Ledger.open((root / "ledger").as_uri()).entry("ml-research", run_id)
    assert entry is not None
    return entry


def assert_balanced(burst_cmd: list[str], root: Path, run_id: str, ending: str | None) -> Entry:
    """No open reservation and nothing queued; every window's usage is what the settled runs
    used; the run's entry is settled (with its ending, where a command other than teardown
    settled it)."""
    proc = _burst(burst_cmd, "budget", "--ledger", (root / "ledger").as_uri(), "--json")
    assert proc.returncode == 0, proc.stderr
    team = json.loads(proc.stdout)["teams"]["ml-research"]
    assert (team["open_reservations"], team["queued"], team["reserved_usd"]) == (0, 0, 0)
    for w in team["windows"]:
        assert w["used_usd"] == pytest.approx(team["settled_actual_usd"], abs=1e-5)
        assert w["used_gpu_hours"] == pytest.approx(team["settled_actual_gpu_hours"], abs=1e-5)
    entry = _entry(root, run_id)
    assert entry.state == "settled" and entry.ending == ending
    assert entry.actual_usd is not None and entry.actual_usd <= entry.reserved_usd
    return entry


def _run(burst_cmd: list[str], spec: Path, root: Path, run_id: str, *extra: str) -> int:
    proc = _burst(burst_cmd, "run", str(spec), "--runs-root", str(root), "--run-id", run_id,
                  *extra)  # fmt: skip
    return proc.returncode


@pytest.mark.parametrize(
    ("ending", "extra", "code"),
    [("succeeded", (), 0), ("failed", ("--fail-at", "train"), 1)],
)
def test_an_ended_run_is_settled_by_its_teardown(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path, ending: str,
    extra: tuple[str, ...], code: int,
) -> None:  # fmt: skip
    root, run_id = tmp_path / "runs", f"{ending}-1"
    assert _run(burst_cmd, quickstart_in, root, run_id, *extra) == code
    entry = assert_balanced(burst_cmd, root, run_id, None)
    report = json.loads((root / run_id / "report.json").read_text())
    assert report["status"] == ending
    if ending == "succeeded":  # one GPU-hour basis: the report's figure is the ledger's
        assert entry.actual_gpu_hours is not None and entry.actual_gpu_hours > 0
        shown = _burst(burst_cmd, "report", run_id, "--runs-root", str(root), "--json")
        # the same number (the report rounds to the ledger's 6 places): compared as numbers,
        # not as a string prefix, which a value near a rounding boundary (0.005997) fails
        figure = json.loads(shown.stdout)["gpu_hours"]
        assert figure == pytest.approx(entry.actual_gpu_hours, abs=1e-6), shown.stdout


def test_a_cancelled_run_is_settled(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "cancelled-1"
    env = {**os.environ, "BURST_STEP_PACE_S": "0.4"}  # train takes 12 s or more
    runner = subprocess.Popen(
        [*burst_cmd, "run", str(quickstart_in), "--runs-root", str(root), "--run-id", run_id],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        for _ in range(600):  # bounded poll: until train runs (its reservation is open)
            if (root / run_id / "logs" / "train.log").exists() or runner.poll() is not None:
                break
            time.sleep(0.2)
        assert _entry(root, run_id).state == "admitted"
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=300) == 130
    finally:
        if runner.poll() is None:
            runner.kill()
    assert_balanced(burst_cmd, root, run_id, None)


def _killed(burst_cmd: list[str], spec: Path, root: Path, run_id: str) -> dict[str, Any]:
    code = _run(burst_cmd, spec, root, run_id, "--kill-runner-at", "train")
    assert code == -signal.SIGKILL
    held = _entry(root, run_id)
    assert held.state == "admitted"  # the runner died with its reservation open
    proc = _burst(burst_cmd, "queue", "--runs-root", str(root), "--json",
                  env={**os.environ, "BURST_LEDGER": (root / "ledger").as_uri()})  # fmt: skip
    queue: dict[str, Any] = json.loads(proc.stdout)["teams"]["ml-research"]
    assert [r["run_id"] for r in queue["admitted"]] == [run_id]
    return queue


def test_a_killed_run_is_settled_by_burst_down(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "killed-1"
    _killed(burst_cmd, quickstart_in, root, run_id)
    down = _burst(burst_cmd, "down", run_id, "--runs-root", str(root))
    assert down.returncode == 0, down.stderr
    assert "ledger: team ml-research's reservation of $" in down.stdout
    assert_balanced(burst_cmd, root, run_id, "reaped")
    again = _burst(burst_cmd, "down", run_id, "--runs-root", str(root), "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["settled"] is None  # once


def test_a_killed_run_is_settled_by_burst_reap(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "reaped-1"
    _killed(burst_cmd, quickstart_in, root, run_id)
    reap = _burst(burst_cmd, "reap", "--yes", "--json", "--runs-root", str(root),
                  "--now", "2099-01-01T00:00:00Z",
                  env={k: v for k, v in os.environ.items() if k != "ARGO_SERVER"})  # fmt: skip
    assert reap.returncode == 0, reap.stderr
    assert [s["run_id"] for s in json.loads(reap.stdout)["settled"]] == [run_id]
    assert_balanced(burst_cmd, root, run_id, "reaped")
