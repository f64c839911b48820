"""A run past its budget is stopped and torn down, with the reason in the report (real run:
BURST_BUDGET_TIME_SCALE=3600 makes each second count as an hour of the plan's rate)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def test_run_over_budget_is_stopped_torn_down_and_explained(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    spec = quickstart_in.read_text().replace("max_usd: 5000", "max_usd: 50")
    assert "max_usd: 50\n" in spec
    quickstart_in.write_text(spec)
    env = {**os.environ, "BURST_BUDGET_TIME_SCALE": "3600"}
    proc = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "broke"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 3, proc.stderr
    report = json.loads((runs_root / "broke" / "report.json").read_text())
    assert report["status"] == "budget-stopped"  # its ending (burst.endings), exit 3
    assert report["failure"]["step"] == "train"
    assert "budget exceeded" in report["failure"]["message"]
    assert "max_usd $50.00" in report["failure"]["message"]
    assert report["resources_remaining"] == 0
    assert {s["name"]: s["status"] for s in report["steps"]}["teardown"] == "succeeded"
    train = json.loads((runs_root / "broke" / "docs" / "train.json").read_text())
    assert train["attempts"][-1]["outcome"] == "budget-exceeded"
    assert train["final_step"] < 30  # stopped before the end ...
    assert train["cost_usd"] > 50  # ... once the dollars ran out
