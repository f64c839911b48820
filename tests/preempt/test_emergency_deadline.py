"""Issue 44: an emergency save never commits past the notice's deadline, and a routine save
already in flight at the notice is not dropped for it (what e0ff626 found: armed for every
save, a routine save landing a moment after a short grace's deadline was refused and runs
resumed from further back).

The train loop's own store (``RunCheckpoints``) over a file store, with its real checkpoint
worker process; the worker is held before a manifest at a named fault point
(``before-manifest@<step>``, action ``pause``) and let go once the deadline has passed. No
wall-clock time is asserted: the tests wait for the deadline, then assert what committed.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from attempts_harness import write_spec

from burst import faults
from burst.errors import CheckpointError
from burst.preempt.emergency import ASSUMED_BYTES_PER_S, SaveCosts, choose_emergency_save
from burst.spec import load_spec
from burst.train.checkpoints import RunCheckpoints, SaveAbandoned

pytestmark = [pytest.mark.slow]


def _state() -> dict[str, object]:
    return {"model": {"w": torch.arange(64, dtype=torch.float32)}, "step": 0}


def _held(tmp: Path, monkeypatch: pytest.MonkeyPatch, step: int) -> Path:
    hold = tmp / "hold"
    hold.mkdir()
    monkeypatch.setenv("BURST_CHECKPOINT_FAULT", f"before-manifest@{step}")
    monkeypatch.setenv(faults.ONCE_ENV, str(tmp / "fired"))
    monkeypatch.setenv(faults.ACTION_ENV, f"pause:{hold}")
    return hold


def _wait_for(path: Path) -> None:
    end = time.monotonic() + 120
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def _past(deadline: float) -> None:
    while time.time() <= deadline:
        time.sleep(0.05)


def test_a_routine_save_in_flight_at_the_deadline_still_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = _held(tmp_path, monkeypatch, 5)
    store = RunCheckpoints(load_spec(write_spec(tmp_path)), "routine")
    try:
        store.save(5, _state(), "full")  # routine: held before its manifest
        _wait_for(hold / "paused")
        deadline = time.time() + 0.5  # the notice: its deadline passes with 5 in flight
        store.arm(deadline)
        with store.bound(deadline), pytest.raises(SaveAbandoned):
            store.save(7, _state(), "full")  # the emergency save is never handed over
        _past(deadline)
        (hold / "resume").touch()
        store.commit(timeout=120)  # step 5 lands after the deadline: not refused
        assert [(r.step, r.tier) for r in store.refs()] == [(5, "full")]
    finally:
        store.close()


def test_an_emergency_save_past_the_deadline_never_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    hold = _held(tmp_path, monkeypatch, 7)
    store = RunCheckpoints(load_spec(write_spec(tmp_path)), "emergency")
    try:
        store.save(5, _state(), "full")
        store.commit(timeout=120)
        deadline = time.time() + 1.0
        store.arm(deadline)
        with store.bound(deadline):
            store.save(7, _state(), "full")  # handed over, held before its manifest
        _wait_for(hold / "paused")
        _past(deadline)
        (hold / "resume").touch()
        with pytest.raises(CheckpointError, match="deadline passed"):
            store.commit(timeout=120)
        # at the deadline, 5 was what was committed: it still is
        assert [(r.step, r.tier) for r in store.refs()] == [(5, "full")]
    finally:
        store.close()


def test_an_emergency_save_within_the_deadline_commits(tmp_path: Path) -> None:
    store = RunCheckpoints(load_spec(write_spec(tmp_path)), "fits")
    try:
        store.arm(time.time() + 300)
        store.save(7, _state(), "full")
        store.commit(timeout=120)
        assert [(r.step, r.tier) for r in store.refs()] == [(7, "full")]
    finally:
        store.close()


def test_the_choice_records_the_bandwidth_and_sizes_it_weighed() -> None:
    measured = SaveCosts(full_bytes=3_000_000_000, weights_bytes=1_000_000_000, bytes_per_s=100e6)
    # a 60-s window: half of it (30 s) holds weights-only (10 s x2), not full (30 s x2)
    c = choose_emergency_save(60.0, measured).as_dict()
    assert c["tier"] == "weights" and c["throughput"] == "measured"
    assert c["bytes_per_s"] == 100e6
    assert (c["full_bytes"], c["weights_bytes"]) == (3_000_000_000, 1_000_000_000)
    unmeasured = SaveCosts(full_bytes=10, weights_bytes=5, bytes_per_s=None)
    c = choose_emergency_save(120.0, unmeasured).as_dict()
    assert c["throughput"] == "assumed" and c["bytes_per_s"] == ASSUMED_BYTES_PER_S
