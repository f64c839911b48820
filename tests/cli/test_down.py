"""`burst down RUN` (issue 29): destroy what a stopped local run left, now, and show it as
reaped; refused while the run is live. Real Terraform state left by a provision step nobody
tore down (tests/teardown/provisioning.py)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
from teardown.provisioning import provision_only

from burst.infra.terraform import count_state_resources

pytestmark = pytest.mark.e2e


def _burst(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*burst_cmd, *args], capture_output=True, text=True, timeout=300)


def test_down_destroys_what_a_dead_run_left(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    run_id = f"down-{uuid.uuid4().hex[:8]}"
    state = provision_only(quickstart_in, run_id, runs_root, "ap-southeast-1")
    assert count_state_resources(state) > 0
    proc = _burst(burst_cmd, "down", run_id, "--runs-root", str(runs_root), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["resources_remaining"] == 0
    assert count_state_resources(state) == 0
    st = json.loads(
        _burst(burst_cmd, "status", run_id, "--runs-root", str(runs_root), "--json").stdout
    )
    assert st["status"] == "reaped"


def test_down_of_an_unknown_run_is_one_line(burst_cmd: list[str], tmp_path: Path) -> None:
    proc = _burst(burst_cmd, "down", "nope-1", "--runs-root", str(tmp_path))
    assert proc.returncode == 2 and "not a local run" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
