"""A run that ends while `burst status` reads it (issue 46, live views): the first look finds
no report and a live driver; by the heartbeat's read the runner has written report.json and
released its lease. That view said `unknown` ("report.json cannot be read"), and
`status --follow` stopped there, never printing how the run ended (a CI run of
tests/cli/test_run_endings.py saw it once under load). The race is made certain here: the
read of the step logs (between the two) is where the run ends (a hook on that read, named as
such: the timing cannot be had otherwise)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from burst.lease import Lease, heartbeat_key, heartbeat_store
from burst.obs import run_view


def test_a_run_that_ends_mid_read_shows_its_ending(
    run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = run_dir / "report.json"
    ended = json.loads(report.read_text())["status"]
    text = report.read_bytes()
    report.unlink()
    driver = Lease.for_env(
        heartbeat_store(run_dir.name, run_dir), heartbeat_key("driver"), "test driver",
        "the run's driver lease",
    )  # fmt: skip
    driver.take()
    assert run_view.load_run(run_dir).status == "running"
    real = run_view._read_log_events
    calls: list[int] = []

    def the_run_ends_here(logs: Path) -> Any:  # the hook: the runner finishes mid-read
        if not calls:
            report.write_bytes(text)
            driver.release()
        calls.append(1)
        return real(logs)

    monkeypatch.setattr(run_view, "_read_log_events", the_run_ends_here)
    view = run_view.load_run(run_dir)
    assert view.status == ended != "unknown", view.warnings
    assert not any("cannot be read" in w for w in view.warnings)
