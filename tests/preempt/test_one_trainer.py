"""Attempt records and the trainer lease (issue 16), with real processes.

* An attempt SIGKILLed mid-training leaves its record open; the next attempt counts it as a
  killed attempt (new number, its hours in the budget guard), and the report lists it.
* A second trainer on a live run is refused with one line naming the holder; once the holder
  is dead, the next one takes the lease over and resumes.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path

import pytest
from attempts_harness import run_attempt, start_attempt, write_spec

from burst.errors import EXIT_REFUSED
from burst.lease import TRAINER_KEY
from burst.obs.report import build_report
from burst.runs import run_paths

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

FAST_LEASE = {"BURST_LEASE_TTL_S": "2"}
#: the killed attempt's hours must show: one second counts a minute (24 h = 1440 s, never hit)
COUNTED = {**FAST_LEASE, "BURST_BUDGET_TIME_SCALE": "60"}
#: the attempt that is killed is paced (10 ms a step): unpaced, the tiny model ran its 400
#: steps in under a second on a quiet machine and ended "done" before the test saw step 60
#: (a CI run); the refused second trainer must likewise find the first one still training
PACED = {"BURST_STEP_PACE_S": "0.01"}


def _records(tmp: Path, run_id: str) -> list[dict]:  # type: ignore[type-arg]
    folder = tmp / "store" / run_id / "train" / "attempts"
    if not folder.is_dir():
        return []
    out = []
    for p in sorted(folder.glob("*.json")):
        try:
            out.append(json.loads(p.read_text()))
        except ValueError:
            continue
    return out


def _wait(pred, timeout: float = 120.0) -> None:  # type: ignore[no-untyped-def]
    end = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < end, "condition never met"
        time.sleep(0.05)


def test_a_killed_attempt_is_counted_in_the_report_and_the_budget(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, steps=400, interval=50)
    a = start_attempt(spec, "k", tmp_path / "pod1", {**COUNTED, **PACED})
    # killed once its open record shows progress (hours spent, steps trained)
    _wait(lambda: any(float(r.get("hours") or 0) > 0 for r in _records(tmp_path, "k")))
    _wait(lambda: int((_records(tmp_path, "k") or [{}])[0].get("at_step") or 0) >= 60)
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    killed = _records(tmp_path, "k")[0]
    assert killed["outcome"] == "running" and killed["attempt"] == 1

    b = run_attempt(spec, "k", tmp_path / "pod2", COUNTED)
    assert b.code == 0
    doc = b.doc()
    assert [(x["attempt"], x["outcome"], x.get("killed")) for x in doc["attempts"]] == [
        (1, "died", True),
        (2, "done", None),
    ]
    assert doc["preemptions"] == 1 and doc["killed_attempts"] == 1
    second = _records(tmp_path, "k")[1]
    # the killed attempt's hours are what the budget guard started from
    assert second["budget_spent_before"]["hours"] == pytest.approx(killed["hours"], abs=1e-6)

    paths = run_paths("k", tmp_path / "pod2")
    shutil.copyfile(spec, paths.spec)
    report = build_report(paths, [])
    assert [x["outcome"] for x in report["attempts"]] == ["died", "done"]
    assert report["attempts"][0]["killed"] is True
    assert report["preemptions"] == 1
    assert report["final_step"] == 400
    assert report["store"]["committed"][-1]["step"] == 400


def test_second_trainer_is_refused_then_takes_over_a_dead_holder(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path, steps=2000, interval=500)
    a = start_attempt(spec, "two", tmp_path / "pod1", {**FAST_LEASE, **PACED})
    lease = tmp_path / "store" / "two" / TRAINER_KEY
    _wait(lambda: lease.exists() and bool(_records(tmp_path, "two")))
    capfd.readouterr()
    b = run_attempt(spec, "two", tmp_path / "pod2", FAST_LEASE)
    err = capfd.readouterr().err
    assert b.code == EXIT_REFUSED
    lines = [ln for ln in err.splitlines() if ln.startswith("burst train: error:")]
    assert len(lines) == 1, err
    assert f"held by run two trainer pid {a.pid}" in lines[0]
    assert len(_records(tmp_path, "two")) == 1, "the refused trainer wrote nothing"
    os.kill(a.pid, signal.SIGKILL)
    a.wait()
    c = run_attempt(spec, "two", tmp_path / "pod3", {**FAST_LEASE})
    assert c.code == 0
    assert [x["attempt"] for x in c.doc()["attempts"]] == [1, 2]
