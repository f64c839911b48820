"""The reaper's state path, with real Terraform state left behind by a run nobody tore down."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from burst.infra.terraform import count_state_resources


def _provision_only(spec: Path, run_id: str, runs_root: Path) -> Path:
    """Provision as the pipeline does, then stop: as if the runner died before teardown."""
    plan = runs_root / "plan.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    plan.write_text(json.dumps({"candidates": [
        {"region": "ap-southeast-1", "provider": "aws", "capacity": "spot"}]}))
    subprocess.run([sys.executable, "-m", "steps.provision", "--spec", str(spec), "--run-id",
                    run_id, "--runs-root", str(runs_root), "--input", f"plan={plan}"],
                   check=True, capture_output=True)
    state = runs_root / run_id / "terraform" / "terraform.tfstate"
    assert count_state_resources(state) > 0
    return state


def _reap(burst_cmd: list[str], runs_root: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([*burst_cmd, "reap", "--json", "--runs-root", str(runs_root), *args],
                          capture_output=True, text=True)
    return proc.returncode, json.loads(proc.stdout)


def test_reap_destroys_expired_state_and_then_finds_nothing(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    state = _provision_only(quickstart_in, "orphan-1", runs_root)

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
    proc = subprocess.run([*burst_cmd, "reap", "--now", "tomorrow"], capture_output=True,
                          text=True)
    assert proc.returncode == 2
    assert "--now 'tomorrow'" in proc.stderr and "Traceback" not in proc.stderr
