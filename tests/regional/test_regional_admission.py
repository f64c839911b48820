"""A regional run is admitted against its team's budget as every run is (issue 42): each
region's provision reserves the region's share of the run's budget before anything is rented
there, and a team without room refuses the run (exit 3) with nothing provisioned. Before the
fix a regional run skipped admission: it rented GPUs in every region with no reservation."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.admission.ledger import Ledger
from burst.errors import EXIT_REFUSED
from burst.runner.regional import RegionalOptions, run_regional
from burst.spec import load_spec

from .regional_specs import TWO, regional_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_team_without_room_refuses_a_regional_run_before_any_region_is_rented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = (tmp_path / "ledger").resolve().as_uri()
    monkeypatch.setenv("BURST_LEDGER", ledger)
    Ledger.open(ledger).set_teams("teams:\n  ml-research:\n    day: {gpu_hours: 1}\n", "teams.yaml")
    spec = regional_spec(tmp_path, TWO)
    opts = RegionalOptions(time_scale=0.0, wait_limit_s=60, stores="dir")
    report = run_regional(load_spec(spec), spec, tmp_path / "poor", "poor", opts)
    assert report.exit_code == EXIT_REFUSED, report.failure
    failure = report.failure.message if report.failure is not None else None
    assert failure is not None and "team ml-research" in failure, failure
    assert "refused before anything was rented" in failure
    assert report.regional is not None
    assert report.regional.provisioned == [] and report.regional.attempts == []
    entries = Ledger.open(ledger).entries("ml-research")
    assert {e.run_id for e in entries} <= {f"poor-{r}" for r in TWO}
    assert any(e.state == "refused" for e in entries), entries
