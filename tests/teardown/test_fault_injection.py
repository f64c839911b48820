"""The fault-injection harness: whatever step fails, the run ends non-zero, the report names
the failure and teardown's outcome, and nothing is left in the state (real Terraform). The
failure in train is also the walking skeleton's and the runner's "a failed train still tears
down" (they were two more runs of the same command in tests/skeleton/test_run_local.py and
tests/runner/test_local_run.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from burst.infra.terraform import count_state_resources

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


@pytest.mark.parametrize(
    ("fail_at", "failed_step"),
    [
        ("preflight", "preflight"),
        ("plan", "plan"),
        ("verify-image", "verify-image"),
        ("provision:midway", "provision"),
        ("train", "train"),
        ("teardown", "teardown"),
    ],
)
def test_any_failure_ends_nonzero_with_nothing_left(
    fail_at: str, failed_step: str, runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    run_id = "fault-" + fail_at.replace(":", "-")
    proc = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", run_id, "--fail-at", fail_at],
        capture_output=True,
        text=True,
    )
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads((runs_root / run_id / "report.json").read_text())
    assert report["status"] == "failed"
    assert report["failure"]["step"] == failed_step
    assert report["resources_remaining"] == 0
    assert count_state_resources(Path(report["terraform_state"])) == 0
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["teardown"]["status"] == "succeeded"
    assert report["teardown"]["destroyed"] is True
    if fail_at == "provision:midway":
        # the failed provision really created resources, which teardown then destroyed
        log = (runs_root / run_id / "logs" / "teardown.log").read_text()
        assert "Destroy complete! Resources: 0 destroyed" not in log
    if fail_at == "train":
        assert proc.returncode == 1  # a failure, not a preemption (75) nor bad input (2)
        assert [s["name"] for s in report["steps"]] == [  # the helper give-up is not a step
            *("preflight", "plan", "verify-image", "provision", "train", "teardown")
        ]
        assert steps["provision"]["status"] == "succeeded"
        assert steps["train"]["status"] == "failed"
        assert steps["train"]["attempts"] == 1  # exit 1 is not a preemption: no retry
        # provision really created resources, which teardown then destroyed
        provision = json.loads((runs_root / run_id / "docs" / "provision.json").read_text())
        assert provision["outputs"]["node_names"]
    if fail_at == "teardown":
        assert report["teardown"]["injected_failures"] == [1, 2]
        assert report["teardown"]["attempts"] == 3
