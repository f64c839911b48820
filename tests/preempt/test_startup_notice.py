"""A stop notice while the train step starts is kept (burst.preempt.signals.watch_from_start):
the step used to catch SIGTERM only once its loop's watchers started, seconds in (torch's
import, the spec, the store), and a SIGTERM before that killed it with the default action
(exit 143: no attempt record, neither retried nor restarted by the template: the run failed).
And the watchers leave no handler behind when one of them cannot start.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from burst import recovery
from burst.attempt_records import FILE_NAME, read_file
from burst.errors import EXIT_PREEMPTED, BadInputError
from burst.preempt.watch import start_watchers
from tests.preempt.attempts_harness import REPO, write_spec


@pytest.mark.slow
def test_a_sigterm_while_the_step_starts_is_a_preemption(tmp_path: Path) -> None:
    """``python -m burst.steps.train`` started with SIGTERM held and sent one at once: the
    signal waits until the step first catches it (its first act, before its imports), so it
    arrives while the step starts, every time. The attempt is a preemption at step 0."""
    spec = write_spec(tmp_path)
    runs_root = tmp_path / "runs"
    argv = [sys.executable, "-m", "burst.steps.train", "--spec", str(spec), "--run-id", "early"]
    argv += ["--runs-root", str(runs_root), "--out", str(tmp_path / "train.json")]
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURST_")}
    env["PYTHONPATH"] = str(REPO)
    pid = os.posix_spawn(sys.executable, argv, env, setsigmask={signal.SIGTERM})
    os.kill(pid, signal.SIGTERM)
    end = time.monotonic() + 300
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0:
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            pytest.fail("the train step did not end in 300 s")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(done[1]) == EXIT_PREEMPTED  # the old step trained on: 0
    (rec,) = read_file(runs_root / "early" / FILE_NAME)
    assert rec.outcome == "preempted" and rec.ended_at_step == 0
    assert rec.notice is not None and rec.notice.source == "sigterm"
    assert rec.recovery_source == recovery.CONTROL_PLANE


def test_watchers_that_cannot_start_leave_no_signal_handler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bad setting stops the watchers before they watch: the process's handlers are as they
    were (a handler left behind swallowed later SIGTERMs: a forked attempt trained on)."""
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    monkeypatch.setenv("BURST_PREEMPT_POLL_S", "soon")
    with pytest.raises(BadInputError, match="BURST_PREEMPT_POLL_S"):
        start_watchers(names=["aws"]).stop()
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
