"""The local demonstration, end to end: `burst run examples/quickstart.yaml --preempt-at-step 7
--preempt-at-step 19` succeeds after two real SIGTERMs, with the weights of a run without."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _run(burst_cmd: list[str], spec: Path, run_id: str, runs: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    p = subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", run_id, "--runs-root", str(runs), *extra],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert p.returncode == 0, p.stderr
    return json.loads((runs / run_id / "report.json").read_text())  # type: ignore[no-any-return]


def test_quickstart_preempted_at_7_and_19_ends_with_the_same_weights(
    tmp_path: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    runs = tmp_path / "runs"
    plain = _run(burst_cmd, quickstart_in, "plain", runs)
    pre = _run(
        burst_cmd, quickstart_in, "pre", runs, "--preempt-at-step", "7", "--preempt-at-step", "19"
    )
    assert pre["status"] == "succeeded"
    assert pre["final_weights_sha256"] == plain["final_weights_sha256"]
    assert len(pre["final_weights_sha256"]) == 64
    train = json.loads((runs / "pre" / "docs" / "train.json").read_text())
    assert train["preemptions"] == 2
    assert [a["resumed_from"] for a in train["attempts"]] == [0, 7, 19]
    assert [a["preempted"] for a in train["attempts"]] == [True, True, False]
    assert [a["emergency_save"]["tier"] for a in train["attempts"][:2]] == ["full", "full"]
    assert pre.get("preemptions", train["preemptions"]) == 2
    lines = (runs / "pre" / "train-attempts.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert json.loads((runs / "pre" / "preempt-demo.json").read_text()) == {"fired": [7, 19]}
    plain_train = json.loads((runs / "plain" / "docs" / "train.json").read_text())
    assert plain_train["preemptions"] == 0 and len(plain_train["attempts"]) == 1
