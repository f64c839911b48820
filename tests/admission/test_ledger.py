"""The team ledger and budget-aware admission, on a local ledger (unit level, no processes)."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from burst.admission.admit import BudgetRefused, admit, reservation, settle
from burst.admission.budgets import parse_teams
from burst.admission.ledger import Ledger, team_key
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.errors import EXIT_BAD_INPUT, EXIT_REFUSED, BadInputError
from burst.spec import BurstJob, load_spec
from burst.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
NOW = dt.datetime(2026, 11, 27, 12, tzinfo=dt.UTC).timestamp()


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat()


DAY = 86400.0


@pytest.fixture
def job() -> BurstJob:
    return load_spec(REPO / "examples" / "quickstart.yaml")


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("BURST_LEASE_SETTLE_S", "0")
    return Ledger(LocalStore(tmp_path / "ledger", fsync=False), lock_wait_s=5)


def budgets(ledger: Ledger, text: str) -> None:
    ledger.set_teams(text, "teams.yaml")


def cand(price: float, gpus: int = 8, egress: float = 0.0, storage: float = 0.0) -> Candidate:
    return Candidate(
        region="ap-southeast-1",
        provider="aws",
        price_per_hour=price,
        gpus=gpus,
        egress_usd=egress,
        storage_usd=storage,
    )


def test_the_reservation_is_the_dearest_candidate_capped_at_the_budget(job: BurstJob) -> None:
    hours, cap = job.budget.max_hours, job.budget.max_usd
    cheap = cand(cap / hours / 4, egress=1.0, storage=2.0)
    r = reservation(job, [cheap, cand(cap / hours / 2, gpus=16)])
    assert r.compute_usd == pytest.approx(cap / 2)
    assert r.gpu_hours == pytest.approx(16 * hours)
    capped = reservation(job, [cand(cap * 10, egress=1.0, storage=2.0)])
    assert capped.compute_usd == pytest.approx(cap)  # the budget guard stops the run there
    assert capped.usd == pytest.approx(cap + 3.0)


def test_admits_within_budget_and_refuses_past_it_with_one_line(
    job: BurstJob, ledger: Ledger
) -> None:
    budgets(ledger, "teams:\n  ml-research:\n    day: {usd: 100}\n    month: {usd: 1000}\n")
    price = 60 / job.budget.max_hours  # $60 for the budget's hours
    first = admit(ledger, job, "run-a", [cand(price)], now=NOW)
    assert first.state == "admitted" and first.reserved_usd == pytest.approx(60)
    with pytest.raises(BudgetRefused) as info:
        admit(ledger, job, "run-b", [cand(price)], now=NOW + 60)
    line = info.value.one_line()
    assert info.value.exit_code == EXIT_REFUSED
    assert "\n" not in line
    assert "team ml-research: day budget has $40.00 of $100.00 left" in line
    assert "run run-b reserves $60.00" in line and "refused before anything was rented" in line
    refused = ledger.entry("ml-research", "run-b")
    assert refused is not None and refused.state == "refused" and refused.charge() == (0, 0)
    # run-a used its $60 in its first hour; a day later the day window has room again (an
    # open reservation would still count in full); the month still counts run-a
    ran = TrainAttempt(attempt=1, cost_usd=60, hours=1, started_at=_iso(NOW),
                       finished_at=_iso(NOW + 3600))  # fmt: skip
    settle(ledger, "ml-research", "run-a", [ran], now=NOW + 3600)
    later = admit(ledger, job, "run-c", [cand(price)], now=NOW + 3600 + DAY + 1)
    assert later.state == "admitted"
    month = {s.window: s for s in ledger.standing("ml-research", NOW + 3600 + DAY + 2)}["month"]
    assert month.used_usd == pytest.approx(120)


def test_gpu_hours_are_a_limit_too(job: BurstJob, ledger: Ledger) -> None:
    budgets(ledger, "teams:\n  ml-research:\n    week: {gpu_hours: 10}\n")
    with pytest.raises(BudgetRefused, match=r"week budget has 10.0 of 10.0 GPU-hours left"):
        admit(ledger, job, "big", [cand(0.01, gpus=64)], now=NOW)


def test_a_dated_override_replaces_the_window_while_it_lasts(job: BurstJob, ledger: Ledger) -> None:
    budgets(
        ledger,
        "teams:\n  ml-research:\n    week: {usd: 10}\n    overrides:\n"
        "      - {window: week, start: 2026-11-20, end: 2026-11-28, usd: 500, reason: deadline}\n",
    )
    price = 100 / job.budget.max_hours
    assert admit(ledger, job, "inside", [cand(price)], now=NOW).state == "admitted"
    after = dt.datetime(2026, 11, 28, 1, tzinfo=dt.UTC).timestamp()
    with pytest.raises(BudgetRefused, match=r"week budget has \$-90.00 of \$10.00 left"):
        admit(ledger, job, "after", [cand(price)], now=after)
    with pytest.raises(BudgetRefused, match="override 'deadline' until 2026-11-28"):
        admit(ledger, job, "inside-2", [cand(price * 5)], now=NOW)


def test_a_requeue_keeps_its_reservation_and_is_not_checked_again(
    job: BurstJob, ledger: Ledger
) -> None:
    budgets(ledger, "teams:\n  ml-research:\n    day: {usd: 100}\n")
    price = 100 / job.budget.max_hours
    admit(ledger, job, "run", [cand(price)], now=NOW)  # the whole day's budget
    again = admit(ledger, job, "run", [cand(price)], now=NOW + 600)  # provision runs again
    assert again.state == "admitted" and again.requeues == 1
    assert again.reserved_usd == pytest.approx(100) and again.at == NOW


def test_settlement_charges_what_was_used_a_preempted_run_only_its_hours(
    job: BurstJob, ledger: Ledger
) -> None:
    budgets(ledger, "teams:\n  ml-research:\n    day: {usd: 100}\n")
    price = 100 / job.budget.max_hours
    admit(ledger, job, "run", [cand(price * 0.9, egress=1.5, storage=0.5)], now=NOW)
    attempts = [
        TrainAttempt(attempt=1, preempted=True, cost_usd=3.0, hours=0.25),
        TrainAttempt(attempt=2, cost_usd=1.0, hours=0.125),
    ]
    done = settle(ledger, "ml-research", "run", attempts, now=NOW + 60)
    assert done is not None and done.state == "settled"
    assert done.actual_usd == pytest.approx(3.0 + 1.0 + 1.5 + 0.5)
    assert done.actual_gpu_hours == pytest.approx(0.375 * 8)
    assert "2 train attempt(s), 1 preempted" in str(done.basis)
    assert settle(ledger, "ml-research", "run", attempts) is None  # once
    day = {s.window: s for s in ledger.standing("ml-research", NOW + 120)}["day"]
    assert day.used_usd == pytest.approx(6.0)  # the rest of the reservation is free again


def test_a_run_that_never_trained_is_charged_nothing_unreadable_records_everything(
    job: BurstJob, ledger: Ledger
) -> None:
    admit(ledger, job, "idle", [cand(1.0, egress=4.0)], now=NOW)
    idle = settle(ledger, job.team, "idle", [], now=NOW)
    assert idle is not None and idle.actual_usd == 0 and idle.actual_gpu_hours == 0
    held = admit(ledger, job, "lost", [cand(1.0)], now=NOW)
    lost = settle(ledger, job.team, "lost", None, now=NOW)
    assert lost is not None and lost.actual_usd == pytest.approx(held.reserved_usd)


def test_a_team_without_a_budget_is_recorded_never_refused(job: BurstJob, ledger: Ledger) -> None:
    entry = admit(ledger, job, "free", [cand(1e6)], now=NOW)
    assert entry.state == "admitted"
    assert ledger.team_names() == ["ml-research"]


def test_bad_budgets_are_one_line_naming_the_field() -> None:
    with pytest.raises(BadInputError) as info:
        parse_teams("teams:\n  a:\n    day: {dollars: 3}\n", "teams.yaml")
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert info.value.one_line().startswith("teams.yaml: teams.a.day.dollars:")
    with pytest.raises(BadInputError, match="end must be after start"):
        parse_teams(
            "teams:\n  a:\n    overrides: [{window: day, start: 2026-01-02, end: 2026-01-01,"
            " usd: 1}]\n",
            "teams.yaml",
        )


def test_team_names_become_one_safe_key_segment() -> None:
    assert team_key("ml-research") == "ml-research"
    assert "/" not in team_key("a/b c") and team_key("a/b c") != team_key("a_b c")


def test_the_ledger_lives_beside_the_aws_state_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from burst.admission.ledger import ledger_url

    for var in ("BURST_LEDGER", "BURST_TF_STATE_BUCKET", "BURST_TF_STATE_REGION"):
        monkeypatch.delenv(var, raising=False)
    assert ledger_url(tmp_path) == (tmp_path / "ledger").resolve().as_uri()
    monkeypatch.setenv("BURST_TF_STATE_BUCKET", "aws=tf-state,gcp=g")
    monkeypatch.setenv("BURST_TF_STATE_REGION", "ap-southeast-1")
    assert ledger_url(tmp_path) == "s3://tf-state/burst/ledger?region=ap-southeast-1"
    monkeypatch.setenv("BURST_LEDGER", "s3://other/ledger")
    assert ledger_url(tmp_path) == "s3://other/ledger"
