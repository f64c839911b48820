"""--kill-runner-at: the runner itself is SIGKILLed, so nothing in-process can clean up; the
resources stay in the state until `burst reap` destroys them: at once here, since the run's
driver heartbeat names a process that is gone (elsewhere, once the heartbeat lapses)."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

import pytest

from burst.infra.terraform import count_state_resources

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def _reap(burst_cmd: list[str], runs_root: Path, *args: str) -> dict:
    proc = subprocess.run(
        [*burst_cmd, "reap", "--json", "--runs-root", str(runs_root), *args],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_killed_runner_leaves_resources_that_the_reaper_destroys(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    proc = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "killed", "--kill-runner-at", "train"],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    state = runs_root / "killed" / "terraform" / "terraform.tfstate"
    assert count_state_resources(state) > 0, "provision ran, teardown never did"
    assert not (runs_root / "killed" / "report.json").exists()

    # the runner renewed the run's driver heartbeat; its process is gone and nothing else
    # of the run lives: the heartbeat counts as lapsed at once (issue 16), expiry or not
    doc = _reap(burst_cmd, runs_root)  # dry run: found, judged, left alone
    assert [(r["run_id"], r["verdict"]) for r in doc["runs"]] == [("killed", "lapsed")]
    assert count_state_resources(state) > 0

    doc = _reap(burst_cmd, runs_root, "--yes")
    assert [a["action"] for a in doc["actions"]] == ["destroy-from-state"]
    assert count_state_resources(state) == 0

    doc = _reap(burst_cmd, runs_root, "--yes")
    assert doc["runs"] == [] and doc["actions"] == []
