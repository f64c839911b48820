"""Issue 25 bug 1: the emergency save waited with no time limit for a save already in flight,
so a slow upload during a reclaim outlasted the grace period and the pod died with 137 (neither
retried nor requeued). Every wait after a notice is now bounded by its deadline.

Real processes and a real signal: the train step (forked, as ``python -m burst.steps.train`` runs)
and its checkpoint worker, held mid-upload by the named fault point ``before-manifest@10``
(``pause``: a store that has stopped answering). SIGTERM arrives with a 4 s grace period, and
the test plays the kubelet: SIGKILL if the process is still there well after it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from attempts_harness import (
    Attempt,
    committed,
    load_checkpoint,
    run_attempt,
    start_attempt,
    write_spec,
)

from burst import faults
from burst.errors import EXIT_PREEMPTED

pytestmark = [pytest.mark.e2e]

GRACE_S = 4.0
#: how long the emulated kubelet waits past the grace period before its SIGKILL (generous:
#: the machine is shared; today's code waits for the held upload, i.e. for ever)
KUBELET_SLACK_S = 30.0


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def _kubelet(a: Attempt) -> int:
    """Wait for the attempt's exit until the grace period (and the slack) is over; then
    SIGKILL it as the kubelet does: its exit is then -9 (a pod's 137)."""
    end = time.monotonic() + GRACE_S + KUBELET_SLACK_S
    while time.monotonic() < end:
        pid, status = os.waitpid(a.pid, os.WNOHANG)
        if pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(a.pid, signal.SIGKILL)
    _, status = os.waitpid(a.pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_slow_upload_during_a_reclaim_still_exits_75_with_the_last_commit_intact(
    tmp_path: Path,
) -> None:
    spec = write_spec(tmp_path, steps=30, interval=5, full_every=1)  # full saves at 5, 10, ...
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": "before-manifest@10",
        faults.ONCE_ENV: str(tmp_path / "fired"),
        faults.ACTION_ENV: f"pause:{hold}",
        "BURST_SIGTERM_GRACE_S": str(GRACE_S),
    }
    a = start_attempt(spec, "slow", tmp_path / "runs", env)
    writer: int | None = None
    try:
        _wait_for(hold / "paused")  # the upload of step 10 hangs before its manifest
        writer = int((hold / "paused").read_text())
        assert a.wait_until_watching()
        os.kill(a.pid, signal.SIGTERM)
        code = _kubelet(a)
        assert code == EXIT_PREEMPTED, f"exit {code}: the grace period ran out"
        doc = a.doc()
        assert doc["preemptions"] == 1
        emergency = doc["attempts"][-1]["emergency_save"]
        assert emergency["committed"] is False and emergency["in_flight_step"] == 10, emergency
        assert emergency["last_committed"] == {"step": 5, "tier": "full"}
    finally:
        # the node goes with the pod: the held writer dies before it commits step 10
        if writer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(writer, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(a.pid, os.WNOHANG)
    refs = committed(spec, "slow")
    assert [(r.step, r.tier) for r in refs] == [(5, "full")]
    load_checkpoint(spec, "slow", refs[-1])  # intact: every chunk verifies
    # requeued, the next attempt resumes from it and finishes
    again = run_attempt(spec, "slow", tmp_path / "runs")
    assert again.code == 0
    assert again.doc()["attempts"][-1]["resumed_from"] == 5
