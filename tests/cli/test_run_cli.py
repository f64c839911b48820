"""`burst run` at the shell (issue 29): the run id is the only thing on stdout
(RUN=$(burst run SPEC) works), `--json` prints the report instead, progress goes to stderr
unwrapped outside a terminal, and Ctrl-C exits 130 with the `burst resume` line (before: the
run id and everything else on stderr, no --json, Ctrl-C exit 1 and no hint)."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # real `burst run` processes


def _run(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*burst_cmd, "run", *args], capture_output=True, text=True, timeout=300, check=False
    )


def test_stdout_is_the_run_id_or_the_report(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    proc = _run(burst_cmd, str(quickstart_in), "--runs-root", str(root), "--fail-at", "preflight")
    assert proc.returncode != 0
    run_id = proc.stdout.strip()
    assert proc.stdout == run_id + "\n" and (root / run_id / "report.json").exists()
    assert f"run id {run_id}" in proc.stderr and "report:" in proc.stderr
    # outside a terminal the summary is not wrapped at 80 columns
    assert any(len(line) > 80 for line in proc.stderr.splitlines())
    proc = _run(
        burst_cmd, str(quickstart_in), "--runs-root", str(root), "--fail-at", "preflight", "--json"
    )
    report = json.loads(proc.stdout)
    assert report["status"] == "failed" and report["failure"]["step"] == "preflight"


def test_a_run_id_this_runs_root_has_is_refused_for_a_new_spec(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    """`burst run OTHER --run-id ID` where ID is a run of the runs root would take over that
    run's directory, checkpoints and ledger entry (the other spec resuming the old weights):
    refused in one line, exit 2, the old run untouched; its own spec still carries it on."""
    root = tmp_path / "runs"
    first = _run(burst_cmd, str(quickstart_in), "--runs-root", str(root), "--fail-at", "plan")
    run_id = first.stdout.strip()
    report = (root / run_id / "report.json").read_bytes()
    other = tmp_path / "other.yaml"
    other.write_text(quickstart_in.read_text().replace("steps:", "steps: 7 #", 1))
    again = _run(burst_cmd, str(other), "--runs-root", str(root), "--run-id", run_id)
    assert again.returncode == 2, again.stderr
    assert f"--run-id {run_id}: this runs root has a run of that id with another" in again.stderr
    assert f"burst resume {run_id}" in again.stderr and "Traceback" not in again.stderr
    assert (root / run_id / "report.json").read_bytes() == report
    # the same spec under the same id carries the run on (a CI job's next attempt)
    same = _run(
        burst_cmd, str(quickstart_in), "--runs-root", str(root), "--run-id", run_id,
        "--fail-at", "plan",
    )  # fmt: skip
    assert "run of that id" not in same.stderr and same.stdout.strip() == run_id


def test_ctrl_c_exits_130_with_the_resume_line(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root = tmp_path / "runs"
    err = tmp_path / "stderr"
    with err.open("w") as fh:
        proc = subprocess.Popen(
            [*burst_cmd, "run", str(quickstart_in), "--runs-root", str(root)],
            stdout=subprocess.PIPE,
            stderr=fh,
            text=True,
        )
        for _ in range(600):  # poll with a bound: until provision starts
            if "… provision" in err.read_text() or proc.poll() is not None:
                break
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.read_text()[-2000:]
    run_id = out.strip()
    assert f"burst resume {run_id} --runs-root {root}" in err.read_text()
    assert "teardown ran" in err.read_text()
    # the same ending as `burst cancel` (tests/cli/test_run_endings.py), in the report too
    report = json.loads((root / run_id / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("cancelled", 130)
