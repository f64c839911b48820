"""Quota first, then rent (issue 47), on the local ledger: a run that its team's open
reservations keep out waits queued, reserving and renting nothing, until one settles or its
deadline passes; usage counts in the hours it happens (a run over midnight counts on both
days)."""

from __future__ import annotations

import datetime as dt
import threading
import time
from pathlib import Path

import pytest

from burst.admission.admit import BudgetRefused, admit, settle
from burst.admission.ledger import Entry, Ledger
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.spec import BurstJob, load_spec
from burst.storage.local import LocalStore

REPO = Path(__file__).resolve().parents[2]
MIDNIGHT = dt.datetime(2026, 11, 28, tzinfo=dt.UTC).timestamp()
H = 3600.0


@pytest.fixture
def job() -> BurstJob:
    return load_spec(REPO / "examples" / "quickstart.yaml")


@pytest.fixture
def ledger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Ledger:
    monkeypatch.setenv("BURST_LEASE_SETTLE_S", "0")
    ledger = Ledger(LocalStore(tmp_path / "ledger", fsync=False), lock_wait_s=5)
    ledger.set_teams("teams:\n  ml-research:\n    day: {usd: 100, gpu_hours: 1000}\n", "t.yaml")
    return ledger


def cand(job: BurstJob, usd: float) -> Candidate:
    """A candidate whose reservation over the budget's hours is ``usd``."""
    return Candidate(region="ap-southeast-1", provider="aws", capacity="spot",
                     price_per_hour=usd / job.budget.max_hours, gpus=8)  # fmt: skip


def iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).isoformat()


def test_a_run_spanning_midnight_counts_on_both_days(job: BurstJob, ledger: Ledger) -> None:
    admit(ledger, job, "late", [cand(job, 60)], now=MIDNIGHT - 2 * H)
    ran = TrainAttempt(attempt=1, cost_usd=40.0, hours=2.0, gpus=8,
                       started_at=iso(MIDNIGHT - H), finished_at=iso(MIDNIGHT + H))  # fmt: skip
    settled = settle(ledger, "ml-research", "late", [ran], now=MIDNIGHT + H)
    assert settled is not None and settled.actual_gpu_hours == pytest.approx(16)

    def day(until: float) -> tuple[float, float]:
        s = {x.window: x for x in ledger.standing("ml-research", until)}["day"]
        return s.used_usd, s.used_gpu_hours

    assert day(MIDNIGHT) == pytest.approx((20, 8))  # the day before midnight: its first hour
    assert day(MIDNIGHT + DAY_S) == pytest.approx((20, 8))  # the next day: its second hour
    assert day(MIDNIGHT + H) == pytest.approx((40, 16))  # a window over both: all of it


DAY_S = 86400.0


def test_a_run_the_others_reservations_keep_out_waits_queued_then_is_admitted(
    job: BurstJob, ledger: Ledger
) -> None:
    first = admit(ledger, job, "first", [cand(job, 60)])
    got: list[Entry | BaseException] = []

    def second() -> None:
        try:
            got.append(admit(ledger, job, "second", [cand(job, 60)], wait_s=60, poll_s=0.05))
        except BaseException as exc:  # the test reads it
            got.append(exc)

    waiter = threading.Thread(target=second)
    waiter.start()
    try:
        for _ in range(400):  # bounded poll: until it is queued
            queued = ledger.entry("ml-research", "second")
            if queued is not None:
                break
            time.sleep(0.02)
        assert queued is not None and queued.state == "queued" and queued.charge() == (0, 0)
        view = {s.window: s for s in ledger.standing("ml-research", time.time())}["day"]
        assert view.used_usd == pytest.approx(first.reserved_usd)  # the queued run holds none
        assert not got  # still waiting
        settle(ledger, "ml-research", "first", [TrainAttempt(attempt=1, cost_usd=10, hours=1)])
    finally:
        waiter.join(timeout=60)
    assert len(got) == 1 and isinstance(got[0], Entry) and got[0].state == "admitted"


def test_a_queued_run_is_refused_at_its_deadline(job: BurstJob, ledger: Ledger) -> None:
    admit(ledger, job, "holder", [cand(job, 95)])  # $5 left: under GRANT_FLOOR of $60
    with pytest.raises(BudgetRefused, match=r"queued \d+ s until its deadline"):
        admit(ledger, job, "patient", [cand(job, 60)], wait_s=0.3, poll_s=0.05)
    refused = ledger.entry("ml-research", "patient")
    assert refused is not None and refused.state == "refused"


def test_a_run_that_never_fits_whole_gets_what_is_left_or_is_refused(
    job: BurstJob, ledger: Ledger
) -> None:
    """$150 never fits in $100: not queued; admitted with the $40 left (its budget guard
    stops it there: Admission.compute_usd), and the next one, with $0 left, refused."""
    admit(ledger, job, "holder", [cand(job, 60)])
    got = admit(ledger, job, "huge", [cand(job, 150)], wait_s=600, poll_s=0.05)
    assert got.state == "admitted" and got.reserved_usd == pytest.approx(40)
    assert got.compute_usd == pytest.approx(40) and "admitted with the $40.00 left" in str(
        got.refusal
    )
    with pytest.raises(BudgetRefused) as info:
        admit(ledger, job, "more", [cand(job, 150)], wait_s=0, poll_s=0.05)
    assert "day budget has $0.00 of $100.00 left" in info.value.one_line()


@pytest.mark.e2e
def test_the_provision_step_rents_nothing_while_its_run_is_queued(
    runs_root: Path, quickstart_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real provision step (Terraform on the local fake stack): queued behind another
    run's reservation, it writes no Terraform and holds no state; once that run settles, it
    is admitted and provisions."""
    import json
    import os
    import subprocess
    import sys

    from teardown.provisioning import step

    from burst.infra.terraform import count_state_resources

    monkeypatch.setenv("BURST_LEASE_SETTLE_S", "0")
    ledger = Ledger.open((runs_root / "ledger").as_uri())
    runs_root.mkdir(parents=True, exist_ok=True)
    job = load_spec(quickstart_in)
    # the plan's unpriced candidate reserves budget.max_usd ($5000); two do not fit in $8000
    ledger.set_teams("teams:\n  ml-research:\n    day: {usd: 8000}\n", "teams.yaml")
    admit(ledger, job, "holder", [])
    decision = runs_root / "decision.json"
    assert (
        step("preflight", quickstart_in, "waiter", runs_root, "--out", str(decision)).returncode
        == 0
    )
    plan = runs_root / "plan.json"
    plan.write_text(json.dumps({"candidates": [{"region": "ap-southeast-1", "provider": "aws",
                                                "capacity": "spot"}]}))  # fmt: skip
    env = {**os.environ, "BURST_BUDGET_TIME_SCALE": "600"}  # its deadline: 24 h / 600 = 144 s
    proc = subprocess.Popen(
        [sys.executable, "-m", "burst.steps.provision", "--spec", str(quickstart_in),
         "--run-id", "waiter", "--runs-root", str(runs_root), "--input", f"plan={plan}",
         "--input", f"decision={decision}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        for _ in range(600):  # bounded poll: until the step is queued
            queued = ledger.entry("ml-research", "waiter")
            if queued is not None or proc.poll() is not None:
                break
            time.sleep(0.1)
        assert queued is not None and queued.state == "queued", proc.poll()
        state = runs_root / "waiter" / "terraform" / "terraform.tfstate"
        assert not (runs_root / "waiter" / "terraform" / "main.tf").exists()
        assert count_state_resources(state) == 0 and proc.poll() is None
        settle(ledger, "ml-research", "holder", [])
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-2000:]
    admitted = ledger.entry("ml-research", "waiter")
    assert admitted is not None and admitted.state == "admitted"
    assert count_state_resources(state) > 0


def test_the_budget_guard_stops_a_run_at_what_its_team_granted(job: BurstJob) -> None:
    from burst.budget import BudgetExceeded
    from burst.documents import ProvisionDocument
    from burst.documents.provision import Admission
    from burst.train.spending import open_budget

    def doc(compute: float) -> ProvisionDocument:
        adm = Admission(team="t", reserved_usd=compute, reserved_gpu_hours=1, compute_usd=compute)
        return ProvisionDocument.model_construct(admission=adm)

    granted = open_budget(job, 10.0, [], doc(40.0))  # $10/h, $40 granted
    granted.check(granted.started + 3.9 * H / granted.scale)
    with pytest.raises(BudgetExceeded, match=r"\$40\.00"):
        granted.check(granted.started + 4.1 * H / granted.scale)
    whole = open_budget(job, 10.0, [], doc(job.budget.max_usd * 2))  # never raised past it
    assert whole.max_usd == job.budget.max_usd
