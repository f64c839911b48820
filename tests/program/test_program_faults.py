"""Faults of a user's own program, each with a real program (tests/program/prog.py) under the
real train step (forked as ``python -m burst.steps.train`` runs it; tests/preempt/attempts_harness):
a failing program, a checkpoint half-written / truncated / deleted at exit, a program killed
mid-write, a program that never saves (the step fails), one that ignores the notice."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "preempt"))
from attempts_harness import QUICKSTART, committed, run_attempt, start_attempt

from burst.attempt_records import read_store
from burst.errors import EXIT_BAD_INPUT, EXIT_PREEMPTED
from burst.infra.ckptsync import expected_step
from burst.storage import open_store

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
PROG = Path(__file__).resolve().parent / "prog.py"


def spec(tmp: Path, mode: str, expect_s: float = 600) -> Path:
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store"
    )
    start, end = text.index("training:"), text.index("budget:")
    training = (
        f"training:\n  command: [python, {PROG}, {mode}]\n  steps: 2\n"
        f"  checkpoint:\n    expect_within_s: {expect_s}\n"
    )
    p = tmp / f"{mode}.yaml"
    p.write_text(text[:start] + training + text[end:])
    return p


def steps_of(p: Path, run_id: str) -> list[int]:
    return [r.step for r in committed(p, run_id)]


def last_attempt(a) -> dict:  # type: ignore[no-untyped-def,type-arg]
    return a.doc()["attempts"][-1]  # type: ignore[no-any-return]


def test_a_failing_program_fails_the_step_with_its_code_and_last_lines(tmp_path: Path) -> None:
    p = spec(tmp_path, "fail")
    a = run_attempt(p, "fail", tmp_path / "runs")
    assert a.code == 7  # the program's own code, not requeued
    rec = last_attempt(a)
    assert rec["outcome"] == "failed" and not rec["preempted"]
    assert rec["program"]["exit_code"] == 7
    assert rec["program"]["log_tail"][-1] == "Traceback: ValueError: loss is nan"
    assert "training.command exited 7: Traceback: ValueError: loss is nan" in a.doc()["error"]
    assert steps_of(p, "fail") == [1]  # the work committed before stays


@pytest.mark.parametrize("mode", ["half", "truncate", "delete"])
def test_a_checkpoint_not_whole_at_exit_is_never_committed(tmp_path: Path, mode: str) -> None:
    p = spec(tmp_path, mode)
    a = run_attempt(p, mode, tmp_path / "runs")
    assert a.code == 0
    assert steps_of(p, mode) == [1]
    rec = last_attempt(a)
    name = "ckpt-000002.bin" if mode == "delete" else "ckpt-000002.pt"
    assert name in rec["program"]["not_committed"], rec["program"]


def test_a_program_killed_mid_write_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    p = spec(tmp_path, "hang-mid-write")
    runs = tmp_path / "runs"
    a = start_attempt(p, "kill", runs)
    pid_file = runs / "kill" / "program" / "pid"
    end = time.monotonic() + 60
    while not pid_file.exists():
        assert time.monotonic() < end, "the program never got to its second save"
        time.sleep(0.05)
    time.sleep(0.6)  # the half-written file is seen (unchanged) by at least one scan
    os.kill(int(pid_file.read_text()), signal.SIGKILL)
    assert a.wait() == 128 + signal.SIGKILL
    assert steps_of(p, "kill") == [1]  # the half-written step 2 never became visible
    # the next attempt restores step 1, byte for byte, before the program starts
    p2 = spec(tmp_path, "resume-check")
    p.write_text(p2.read_text())
    b = run_attempt(p, "kill", runs)
    assert b.code == 0, b.doc().get("error")
    rec = last_attempt(b)
    assert rec["resumed_from"] == 1
    assert rec["program"]["log_tail"] == ["resume from ckpt-000001.pt: identical"]


def test_no_checkpoint_in_time_is_a_warning_and_none_at_all_fails_the_step(
    tmp_path: Path,
) -> None:
    p = spec(tmp_path, "quiet", expect_s=1)
    a = run_attempt(p, "quiet", tmp_path / "runs")
    rec = last_attempt(a)
    warnings = rec["program"]["warnings"]
    assert any("no complete checkpoint from the program" in w for w in warnings), warnings
    # a run that committed nothing fails, in one line naming the directory it watched
    assert a.code == EXIT_BAD_INPUT and rec["outcome"] == "failed"
    watched = tmp_path / "runs" / "quiet" / "program" / "checkpoints"
    error = a.doc()["error"]
    assert error.startswith(f"training.command saved no checkpoint burst could commit in {watched}")
    assert "\n" not in error
    # teardown has no checkpoint to wait for (nor after an attempt that ended committing none)
    assert expected_step(read_store(open_store(f"file://{tmp_path}/store/quiet"))) is None
    assert (
        expected_step([{"attempt": 1, "outcome": "done", "ended_at_step": 0, "commits": 0}]) is None
    )


def test_a_program_that_ignores_the_notice_keeps_committed_work_and_reports_the_loss(
    tmp_path: Path,
) -> None:
    p = spec(tmp_path, "ignore")
    runs = tmp_path / "runs"
    a = start_attempt(p, "ignore", runs, {"BURST_SIGTERM_GRACE_S": "5"})
    end = time.monotonic() + 60
    while steps_of(p, "ignore") != [1] or not (runs / "ignore" / "program" / "pid").exists():
        assert time.monotonic() < end, "step 1 never committed"
        time.sleep(0.1)
    os.kill(a.pid, signal.SIGTERM)  # the node's notice: 5 s of grace
    assert a.wait() == EXIT_PREEMPTED
    rec = last_attempt(a)
    assert rec["preempted"] and rec["ended_at_step"] == 1
    assert rec["program"]["saved_on_notice"] is False
    assert rec["program"]["notified_pids"] == []  # it ignores the signal: not sent (it trains on)
    assert rec["program"]["lost_seconds"] > 0 and rec["program"]["lost_gpu_seconds"] > 0
    assert rec["program"]["lost_steps"] >= 0  # from its pace: step 1 after its start
    assert rec["emergency_save"]["committed"] is False
    notice = json.loads((runs / "ignore" / "program" / "notice.json").read_text())
    assert notice["reason"] == "sigterm" and notice["deadline_unix"] > 0
    assert steps_of(p, "ignore") == [1]


def test_a_periodic_save_seen_after_the_notice_is_not_the_save_on_the_notice(
    tmp_path: Path,
) -> None:
    """A save the program finished before the notice but burst saw whole only after it (a slow
    watcher under load) is not the program's save on the notice: burst waits for that one
    (step 3), rather than stopping the program while it saves and resuming from step 2."""
    p = spec(tmp_path, "late-hand-off")
    runs = tmp_path / "runs"
    a = start_attempt(p, "late-hand-off", runs, {"BURST_SIGTERM_GRACE_S": "20"})
    end = time.monotonic() + 60
    while (
        steps_of(p, "late-hand-off") != [1]
        or not (runs / "late-hand-off" / "program" / "pid").exists()
    ):
        assert time.monotonic() < end, "step 1 never committed"
        time.sleep(0.1)
    os.kill(a.pid, signal.SIGTERM)  # the node's notice
    assert a.wait() == EXIT_PREEMPTED
    rec = last_attempt(a)
    assert rec["program"]["exit_code"] == 75, rec["program"]  # it ended itself, not stopped
    assert rec["program"]["saved_on_notice"] is True
    assert rec["emergency_save"]["committed"] is True and rec["ended_at_step"] == 3
    assert steps_of(p, "late-hand-off")[-1] == 3  # (the store keeps the newest two)


def test_the_supervisor_of_a_program_never_imports_torch(tmp_path: Path) -> None:
    """The train step in its program mode supervises a process: it needs no torch (a second
    or two of start-up and hundreds of MiB on every attempt, and a program may train with
    another framework). A ``torch`` that cannot be imported is first on its path here."""
    import subprocess

    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the supervisor imported torch')\n")
    p = spec(tmp_path, "half")
    repo = Path(__file__).resolve().parents[2]
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "burst.steps.train", "--spec", str(p), "--run-id", "no-torch",
         "--runs-root", str(tmp_path / "runs"), "--out", str(out)],
        capture_output=True, text=True, timeout=300, cwd=repo,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(repo)])},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert json.loads(out.read_text())["attempts"][-1]["outcome"] == "done"
