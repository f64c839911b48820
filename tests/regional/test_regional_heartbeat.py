"""A regional worker follows the run's driver heartbeat, where the runner renews it (issue 42).

Before the fix the worker's train loop looked for the driver's heartbeat in the worker's
scratch directory (its ``TrainRun`` run directory), where nothing writes it: at its first
renewal tick (a quarter of the lease TTL, 45 s by default) it read no heartbeat, posted
``driver-lost``, saved and exited 75, and again at every retry, so a regional run whose workers
train longer than a few renewals failed. Each test here fails on that code: the workers train
past several renewal ticks and must end in one attempt each.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.admission.steps import run_ledger
from burst.documents import ProvisionDocument, RunReport
from burst.runner.regional import RegionalOptions, run_regional
from burst.spec import load_spec

from .regional_specs import TWO, regional_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _paced_run(tmp_path: Path, name: str) -> RunReport:
    spec = regional_spec(tmp_path, TWO, name=name, deadline_s=600)
    opts = RegionalOptions(time_scale=0.0, wait_limit_s=900, stores="dir")
    return run_regional(load_spec(spec), spec, tmp_path / name, name, opts)


def _check_one_attempt_each(report: RunReport) -> None:
    assert report.status == "succeeded", report.failure
    r = report.regional
    assert r is not None and r.rounds_completed == r.rounds_planned == 3
    attempts = {(a.role, a.region): a.exit_codes for a in r.attempts}
    assert attempts == {
        ("worker", "ap-southeast-1"): [0],
        ("worker", "me-central-1"): [0],
        ("aggregator", "ap-southeast-1"): [0],
    }, attempts


def test_workers_past_several_heartbeat_renewals_end_without_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 4 s lease (renewed, and the driver's heartbeat checked, every second) and 12 paced
    steps of 0.5 s: every worker passes several renewal ticks with the runner renewing the
    driver's heartbeat all along. No ``driver-lost``, no retry."""
    monkeypatch.setenv("BURST_LEASE_TTL_S", "4")
    monkeypatch.setenv("BURST_STEP_PACE_S", "0.5")
    report = _paced_run(tmp_path, "beats")
    _check_one_attempt_each(report)
    for region in TWO:  # each worker's heartbeat beside the driver's, in the run's directory
        assert (tmp_path / "beats" / "heartbeat" / f"worker-{region}.json").exists()
        assert not (tmp_path / "beats" / "scratch" / f"worker-{region}" / "heartbeat").exists()
        # each region placed as burst-train's provision places (issue 42): its share of the
        # budget reserved in the team ledger, the spec's recovery strategy recorded
        prov = ProvisionDocument.model_validate_json(
            (tmp_path / "beats" / f"provision-{region}.json").read_text()
        )
        job = load_spec(tmp_path / "beats.yaml")  # (regional_spec writes <name>.yaml)
        assert prov.admission is not None and prov.admission.team == job.team
        assert 0 < prov.admission.reserved_usd <= job.budget.max_usd / len(TWO)
        assert prov.recovery is not None
        assert prov.recovery.strategy == str(job.compute.recovery.strategy)
    # each region's teardown settles its entry from its worker's attempt records, which are
    # in the region's store (they were looked for in the spec's store, where a branch writes
    # nothing: every region settled "0 train attempt(s)", charged nothing)
    ledger = run_ledger(tmp_path)
    for region in TWO:
        entry = ledger.find(f"beats-{region}")
        assert entry is not None and entry.state == "settled", entry
        assert entry.basis is not None and entry.basis.startswith("1 train attempt(s)"), entry
        assert entry.actual_gpu_hours is not None and entry.actual_gpu_hours > 0, entry
        # charged at the region's price: its compute, not only the planned egress
        assert entry.actual_usd is not None and entry.actual_usd < entry.reserved_usd
        assert entry.actual_usd >= 0.5 * entry.actual_gpu_hours * entry.reserved_usd / (
            entry.reserved_gpu_hours
        ), entry


@pytest.mark.minutes
def test_workers_training_over_five_minutes_end_without_a_retry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default lease (180 s, renewed every 45 s): 12 steps paced at 26 s, so each worker
    trains over 5 minutes (more than 6 renewal ticks), with no fault: the run ends in one
    attempt of every role."""
    monkeypatch.delenv("BURST_LEASE_TTL_S", raising=False)
    monkeypatch.setenv("BURST_STEP_PACE_S", "26")
    report = _paced_run(tmp_path, "long")
    _check_one_attempt_each(report)
