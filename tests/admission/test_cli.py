"""`burst budget` and `burst queue` over a local ledger (in-process CLI, unit level)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from burst.admission.admit import admit, settle
from burst.admission.ledger import Ledger
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.spec import load_spec
from tests.conftest import BurstCli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("BURST_LEASE_SETTLE_S", "0")
    url = (tmp_path / "ledger").as_uri()
    monkeypatch.setenv("BURST_LEDGER", url)
    monkeypatch.setenv("BURST_RUNS_ROOT", str(tmp_path / "runs"))
    return Ledger.open(url)


def test_budget_and_queue_show_reservations_and_settlements(
    ledger: Ledger, burst_cli: BurstCli
) -> None:
    set_ = burst_cli(["budget", "--set", str(REPO / "examples" / "teams.yaml"), "--json"])
    assert set_.returncode == 0, set_.stderr
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    cand = Candidate(region="ap-southeast-1", provider="aws", price_per_hour=2.5, gpus=8)
    admit(ledger, job, "open-run", [cand])
    admit(ledger, job, "done-run", [cand])
    settle(ledger, job.team, "done-run", [TrainAttempt(attempt=1, cost_usd=1.25, hours=0.5)])

    view = json.loads(burst_cli(["budget", "--json", "--team", "ml-research"]).stdout)
    team = view["teams"]["ml-research"]
    day = next(w for w in team["windows"] if w["window"] == "day")
    assert day["limit_usd"] == 2000 and day["used_usd"] == pytest.approx(60 + 1.25)
    assert team["open_reservations"] == 1 and team["settled_actual_usd"] == pytest.approx(1.25)
    text = burst_cli(["budget"]).stdout
    assert "team ml-research" in text and "team vision (no budget" not in text
    assert "day    used $61.25 of $2,000.00, $1,938.75 left" in text

    queue = json.loads(burst_cli(["queue", "--json"]).stdout)["teams"]["ml-research"]
    assert [r["run_id"] for r in queue["admitted"]] == ["open-run"]
    assert queue["settled"][0]["actual_usd"] == pytest.approx(1.25)
    text = burst_cli(["queue"]).stdout
    assert "team ml-research: queued 0, running 0, admitted 1, refused 0, settled 1" in text


def test_a_bad_teams_file_is_one_line_exit_2(
    ledger: Ledger, burst_cli: BurstCli, tmp_path: Path
) -> None:
    bad = tmp_path / "teams.yaml"
    bad.write_text("teams:\n  a:\n    fortnight: {usd: 1}\n")
    result = burst_cli(["budget", "--set", str(bad)])
    assert result.returncode == 2
    assert "teams.a.fortnight" in result.stderr and "Traceback" not in result.stderr


def test_queue_simulate_prints_the_table_writes_the_report_and_refuses_bad_traces(
    burst_cli: BurstCli, tmp_path: Path
) -> None:
    trace = tmp_path / "trace.yaml"
    trace.write_text(
        "flavors: [{name: s, capacity: spot, gpus: 8, usd_per_gpu_hour: 1}]\n"
        "teams: {a: {semaphore: 2, budget_usd: 100}}\n"
        "generate: {runs: 12, hours: 6, teams: {a: 1}}\n"
    )
    out = tmp_path / "queue.json"
    result = burst_cli(
        ["queue", "simulate", "--trace", str(trace), "--seed", "1", "--out", str(out)]
    )
    assert result.returncode == 0, result.stderr
    assert "| priority inversions |" in result.stdout and "goals:" in result.stdout
    report = json.loads(out.read_text())
    assert set(report["policies"]) == {"fifo-semaphore", "priority", "burst"}
    assert report["trace"]["seed"] == 1 and report["trace"]["runs"] == 12
    trace.write_text("flavors: [{name: s, capacity: reserved, gpus: 8, usd_per_gpu_hour: 1}]\n"
                     "teams: {a: {}}\n")  # fmt: skip
    bad = burst_cli(["queue", "simulate", "--trace", str(trace)])
    assert bad.returncode == 2 and "capacity must be spot or on_demand" in bad.stderr
    assert "Traceback" not in bad.stderr
