"""Issue 44 (found by benchmarks/notice_window.py): a notice that arrives while a routine save
is still uploading, on a store too slow for it to land within the window. The emergency path
waits for that save until the notice's deadline less ``RESERVE_S`` (the time to record the
attempt and exit), then records the attempt and raises ``Preempted``; the loop's exit path then
waited ``RESERVE_S`` more for the same save while closing the store, so the process was still
there at the end of the grace period and the kubelet's SIGKILL ended it (a pod's 137: neither
retried nor requeued) with nothing gained, since the writer finishes a save on its own anyway.

Real processes and a real signal: the train step (forked, as ``python -m burst.steps.train`` runs)
and its checkpoint worker, held mid-upload by the named fault point ``before-manifest@10``
(``pause``). SIGTERM arrives with a grace period, and the test plays the kubelet strictly: the
SIGKILL comes when the grace period it gave is over, not later (test_grace_bound.py gives a
30-s slack; this one gives none). What fails is the exit code, never a timing figure.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from attempts_harness import Attempt, committed, start_attempt, write_spec

from burst import faults
from burst.errors import EXIT_PREEMPTED
from burst.preempt.emergency import RESERVE_S

pytestmark = [pytest.mark.e2e]

#: long beside RESERVE_S, so that the exit path's own work fits in the reserve
GRACE_S = 6.0


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def _strict_kubelet(a: Attempt, sent: float) -> int:
    """The attempt's exit code, or -9 if it was still there when the grace period it was
    given at ``sent`` (time.time() of the SIGTERM) ran out."""
    while time.time() < sent + GRACE_S:
        pid, status = os.waitpid(a.pid, os.WNOHANG)
        if pid:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    pid, status = os.waitpid(a.pid, os.WNOHANG)
    if pid:
        return os.waitstatus_to_exitcode(status)
    os.kill(a.pid, signal.SIGKILL)
    _, status = os.waitpid(a.pid, 0)
    return os.waitstatus_to_exitcode(status)


def test_a_save_that_cannot_land_in_the_window_does_not_hold_the_exit(tmp_path: Path) -> None:
    assert GRACE_S > 4 * RESERVE_S
    spec = write_spec(tmp_path, steps=30, interval=5, full_every=1)  # full saves at 5, 10, ...
    hold = tmp_path / "hold"
    hold.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": "before-manifest@10",
        faults.ONCE_ENV: str(tmp_path / "fired"),
        faults.ACTION_ENV: f"pause:{hold}",
        "BURST_SIGTERM_GRACE_S": str(GRACE_S),
    }
    a = start_attempt(spec, "held", tmp_path / "runs", env)
    writer: int | None = None
    try:
        _wait_for(hold / "paused")  # the upload of step 10 will not land in any window
        writer = int((hold / "paused").read_text())
        assert a.wait_until_watching()
        sent = time.time()
        os.kill(a.pid, signal.SIGTERM)
        code = _strict_kubelet(a, sent)
        assert code == EXIT_PREEMPTED, f"exit {code}: still running at the end of the window"
        emergency = a.doc()["attempts"][-1]["emergency_save"]
        assert emergency["in_flight_step"] == 10, emergency
        assert emergency["last_committed"] == {"step": 5, "tier": "full"}
    finally:  # the node goes with the pod: the held writer dies before it commits step 10
        if writer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(writer, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(a.pid, os.WNOHANG)
    assert [(r.step, r.tier) for r in committed(spec, "held")] == [(5, "full")]
