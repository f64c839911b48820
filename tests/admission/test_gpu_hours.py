"""One GPU-hour basis (issue 46): billed GPU-hours = GPUs rented x hours paid
(``burst.budget.gpu_hours``). Before, the report said 0.048 GPU-hours for the quickstart (the
spec's GPUs x the train step's wall time) and the ledger 0.025 (the reservation's GPUs x the
hours the train attempts metered), neither explained."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from burst.admission.admit import admit, settle
from burst.admission.ledger import Ledger
from burst.documents.plan import Candidate
from burst.documents.train import ATTEMPTS_FILE, TrainAttempt
from burst.spec import load_spec

REPO = Path(__file__).resolve().parents[2]


def test_settlement_counts_the_gpus_each_attempt_rented(tmp_path: Path) -> None:
    """The reservation holds the dearest candidate (an 8-GPU node); the run got a 1-GPU
    shape elsewhere: its GPU-hours are the GPUs it rented, not the reservation's. A record
    written before records said their GPUs counts the reservation's."""
    ledger = Ledger.open((tmp_path / "ledger").as_uri())
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    node = Candidate(region="ap-southeast-3", provider="aws", price_per_hour=75.9552, gpus=8)
    preset = Candidate(region="eu-north1", provider="nebius", price_per_hour=2.95, gpus=1)
    held = admit(ledger, job, "r1", [preset, node])
    assert held.gpus == 8 and held.reserved_gpu_hours == 8 * job.budget.max_hours
    done = settle(
        ledger,
        job.team,
        "r1",
        [
            TrainAttempt(attempt=1, hours=0.5, cost_usd=1.475, gpus=1, preempted=True),
            TrainAttempt(attempt=2, hours=0.25, cost_usd=0.7375, gpus=1),
            TrainAttempt(attempt=3, hours=0.25, cost_usd=18.99),  # an older record
        ],
    )
    assert done is not None and done.actual_gpu_hours == pytest.approx(0.75 + 8 * 0.25)


@pytest.mark.e2e
def test_report_and_ledger_give_one_figure(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    """The quickstart, end to end: the report's GPU-hours are the ledger's, and say how they
    were counted."""
    run = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "gh"], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    ledger = json.loads((runs_root / "gh" / "report.json").read_text())["settlement"]
    proc = subprocess.run(
        [*burst_cmd, "report", "gh", "--json"], capture_output=True, text=True, check=True
    )
    summary = json.loads(proc.stdout)
    assert summary["gpu_hours"] == pytest.approx(ledger["actual_gpu_hours"], abs=1e-4)
    assert summary["gpu_hours_basis"].startswith("billed: 8 GPU(s) rented x ")
    # both are the GPUs rented x the hours the train attempts metered (and were charged for)
    lines = (runs_root / "gh" / ATTEMPTS_FILE).read_text().splitlines()
    records = [json.loads(x) for x in lines if x.strip()]
    assert {a["gpus"] for a in records} == {8}  # the candidate's p5.48xlarge
    metered = sum(a["hours"] for a in records)
    assert ledger["actual_gpu_hours"] == pytest.approx(8 * metered, abs=1e-5)
    text = subprocess.run(
        [*burst_cmd, "report", "gh"], capture_output=True, text=True, check=True
    ).stdout
    assert f"GPU-hours {summary['gpu_hours']:.3f} (8 x h100; billed: 8 GPU(s) rented x" in text
    assert f"({ledger['actual_gpu_hours']:.3f} GPU-hours billed)" in text
