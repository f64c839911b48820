"""`burst runs` shows a reaped run as reaped (issue 29; before: "running" for ever, its
runner dead and its resources destroyed by `burst reap`). Real Terraform state, left behind
by a provision step nobody tore down, destroyed by a real `burst reap --yes`."""

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


def test_a_reaped_run_is_listed_as_reaped(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    run_id = f"orphan-{uuid.uuid4().hex[:8]}"
    state = provision_only(quickstart_in, run_id, runs_root, "ap-southeast-1")
    assert count_state_resources(state) > 0
    rows = json.loads(_burst(burst_cmd, "runs", "--json", "--runs-root", str(runs_root)).stdout)
    # nothing drives it (no report, no driver heartbeat): lost, not running (issue 46)
    assert [r["status"] for r in rows if r["run_id"] == run_id] == ["lost"]
    later = "2099-01-01T00:00:00Z"
    reap = _burst(burst_cmd, "reap", "--runs-root", str(runs_root), "--now", later, "--yes")
    assert reap.returncode == 0, reap.stderr
    assert count_state_resources(state) == 0
    rows = json.loads(_burst(burst_cmd, "runs", "--json", "--runs-root", str(runs_root)).stdout)
    row = next(r for r in rows if r["run_id"] == run_id)
    assert row["status"] == "reaped" and row["resources_remaining"] == 0
    text = _burst(burst_cmd, "runs", "--runs-root", str(runs_root)).stdout
    assert any(line.startswith(run_id) and " reaped " in line for line in text.splitlines())
