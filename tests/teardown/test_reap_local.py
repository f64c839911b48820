"""The reaper's state path, with real Terraform state left behind by a run nobody tore down."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from burst.infra.terraform import count_state_resources

from .provisioning import provision_only


def _reap(burst_cmd: list[str], runs_root: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [*burst_cmd, "reap", "--json", "--runs-root", str(runs_root), *args],
        capture_output=True,
        text=True,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_reap_destroys_expired_state_and_then_finds_nothing(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    state = provision_only(quickstart_in, "orphan-1", runs_root, "ap-southeast-1")
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
