"""Provision a run as the pipeline does (preflight, then provision) and stop there, as if the
runner died before teardown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def step(
    name: str, spec: Path, run_id: str, runs_root: Path, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            f"burst.steps.{name}",
            "--spec",
            str(spec),
            "--run-id",
            run_id,
            "--runs-root",
            str(runs_root),
            *extra,
        ],
        capture_output=True,
        text=True,
        env=os.environ.copy(),
    )


def provision_only(spec: Path, run_id: str, runs_root: Path, region: str) -> Path:
    runs_root.mkdir(parents=True, exist_ok=True)
    decision = runs_root / f"{run_id}-decision.json"
    pre = step("preflight", spec, run_id, runs_root, "--out", str(decision))
    assert pre.returncode == 0, pre.stderr
    plan = runs_root / f"{run_id}-plan.json"
    plan.write_text(
        json.dumps({"candidates": [{"region": region, "provider": "aws", "capacity": "spot"}]})
    )
    proc = step(
        "provision",
        spec,
        run_id,
        runs_root,
        "--input",
        f"plan={plan}",
        "--input",
        f"decision={decision}",
    )
    assert proc.returncode == 0, proc.stderr
    return runs_root / run_id / "terraform" / "terraform.tfstate"
