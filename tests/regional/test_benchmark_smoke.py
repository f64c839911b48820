"""The regional benchmark's code path end to end on a tiny run (--smoke: 8 steps, 2 regions,
H = 4): real gloo processes, the real corpus, both arms; the JSON it writes is complete and
its figures are consistent with each other (not the benchmark's goals: 8 steps say nothing)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.e2e
@pytest.mark.slow
@pytest.mark.minutes  # the benchmark's own path, not burst's: make test-long
def test_benchmark_smoke_writes_valid_json(tmp_path: Path) -> None:
    out = tmp_path / "regional.json"
    script = str(REPO / "benchmarks" / "regional.py")
    proc = subprocess.run(
        [sys.executable, script, "--smoke", "--regions", "2", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["mode"] == "smoke" and doc["steps_per_region"] == 8
    assert doc["corpus"]["files"] > 100 and len(doc["corpus"]["sha256"]) == 64
    row = doc["regions"]["2"]
    base, arm = row["sync_dp"]["best"], row["burst"]["4"]
    assert base["tokens"] == arm["tokens"]  # equal tokens in both arms
    assert arm["rounds"] == 2
    # the ring moved 2 (N - 1) M bytes a step; burst two int8 deltas a round (plus headers)
    assert base["bytes_crossing"] == 8 * 2 * base["grad_bytes"]
    assert arm["param_count"] < arm["bytes_per_round"] / 2 < base["grad_bytes"] / 3
    assert arm["bytes_ratio"] == pytest.approx(arm["bytes_crossing"] / base["bytes_crossing"])
    assert arm["eval_loss_ratio"] == pytest.approx(arm["eval_loss"] / base["eval_loss"])
    assert 0 < arm["eval_loss"] < 6 and 0 < base["eval_loss"] < 6  # ln 256 = 5.55 at the start
    assert abs(arm["planner"]["bytes_error"]) < 0.2
    goals = {"bytes_ratio", "eval_loss_ratio", "wall_ratio", "time_to_target_ratio", "planner"}
    assert set(arm["meets_goals"]) == goals
    # burst trained past equal tokens (8 + 4 steps), evaluated after its syncs; its figures
    # are those at step 8; the time to S's final loss, when reached, is a point of its curve
    assert [p["step"] for p in arm["curve"]] == [4, 8, 12] and arm["extended_to_steps"] == 12
    assert arm["curve"][1]["eval_loss"] == arm["eval_loss"]
    assert arm["curve"][1]["wall_s"] == arm["wall_s"]
    assert arm["time_to_target_s"] in (None, *(p["wall_s"] for p in arm["curve"]))
    # the planner's expected loss ratio is the shipped table's for (2 regions, H 4)
    assert arm["planner"]["predicted_loss_ratio"] > 0
