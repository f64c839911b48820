"""A program under real torchrun (2 CPU ranks, gloo) in the real train step (forked as
``python -m burst.steps.train`` runs it: tests/preempt/attempts_harness):

* ``--preempt-at-step 7`` between two periodic saves (5, 10): the notice comes at the program's
  step 7, every rank's handler runs, every rank saves its part of step 7 (DCP), the attempt
  exits 75, and the next one resumes from step 7 to the end;
* a rank killed by SIGKILL (torchrun exits 1) is a killed program: the step exits 137, which
  recovery restarts, as it does a plain program killed so;
* a rank that raises: its exception is the error's line, not torchrun's separator lines or a
  progress bar.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "preempt"))
from attempts_harness import QUICKSTART, committed, run_attempt

from burst.errors import EXIT_PREEMPTED
from burst.program.exits import KilledWorker, error_line, killed_worker
from burst.recovery import EXIT_KILLED

REPO = Path(__file__).resolve().parents[2]
DCP = REPO / "examples" / "programs" / "dcp_two_ranks.py"
FAIL = Path(__file__).resolve().parent / "rank_fail.py"


def spec(tmp: Path, command: list[str], name: str) -> Path:
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store"
    )
    start, end = text.index("training:"), text.index("budget:")
    words = ", ".join(f'"{w}"' for w in command)
    training = (
        f"training:\n  command: [{words}]\n  launcher: torchrun\n  processes_per_node: 2\n"
        "  steps: 12\n  checkpoint:\n    keep_full: 4\n"
    )
    p = tmp / f"{name}.yaml"
    p.write_text(text[:start] + training + text[end:])
    return p


@pytest.mark.slow
@pytest.mark.e2e
def test_a_notice_between_two_saves_is_saved_by_every_rank_and_resumed(tmp_path: Path) -> None:
    args = ["--steps", "12", "--save-every", "5", "--step-seconds", "0.1"]
    p = spec(tmp_path, [str(DCP), *args], "dcp")
    runs = tmp_path / "runs"
    log = runs / "dcp" / "program" / "program.log"
    env = {"BURST_PREEMPT_AT_STEPS": "7"}
    first = run_attempt(p, "dcp", runs, env)
    rec = first.doc()["attempts"][-1]
    assert first.code == EXIT_PREEMPTED, rec.get("error")
    # the notice came at the program's step 7 (not at the next commit), between saves 5 and 10
    assert rec["emergency_save"]["committed"] is True
    assert rec["emergency_save"]["committed_step"] == 7
    assert rec["program"]["saved_on_notice"] is True and rec["program"]["lost_steps"] == 0
    # both workers got the signal, torchrun's agent did not
    got = rec["program"]["notified"]
    assert len(got) == 2 and all(str(DCP) in n["command"] for n in got), got
    assert sorted(n["pid"] for n in got) == sorted(rec["program"]["notified_pids"])
    text = log.read_text()
    for rank in (0, 1):
        assert f"rank {rank}: notice signal SIGUSR1 received" in text, text[-3000:]
    steps = [r.step for r in committed(p, "dcp")]
    assert steps[-1] == 7 and set(steps) <= {5, 7}, steps

    second = run_attempt(p, "dcp", runs, env)
    doc = second.doc()
    rec = doc["attempts"][-1]
    assert second.code == 0, rec.get("error")
    assert rec["resumed_from"] == 7 and rec["outcome"] == "done"
    assert "at step 7" in log.read_text().split("rank 1: notice signal")[-1]
    steps = [r.step for r in committed(p, "dcp")]
    assert 7 in steps and steps[-1] == 12, steps
    assert doc["preemptions"] == 1 and doc["final_step"] == 12


@pytest.mark.slow
@pytest.mark.e2e
def test_a_rank_killed_under_torchrun_is_a_killed_program(tmp_path: Path) -> None:
    p = spec(tmp_path, ["python", str(FAIL), "kill"], "kill")
    a = run_attempt(p, "kill", tmp_path / "runs")
    error, rec = a.doc()["error"], a.doc()["attempts"][-1]
    assert a.code == EXIT_KILLED, error  # 137: recovery restarts it
    assert rec["program"]["exit_code"] == 1  # what torchrun exited with
    assert rec["program"]["killed_worker"]["signal"] == "SIGKILL"
    assert rec["program"]["killed_worker"]["worker"].startswith("rank 1 (pid ")
    assert error.startswith(
        "training.command exited 1 (reported as 137, as a program killed by SIGKILL): rank 1 (pid "
    ), error
    assert "was killed by SIGKILL; the last committed checkpoint: none" in error, error


@pytest.mark.slow
@pytest.mark.e2e
def test_a_rank_that_raises_shows_its_exception(tmp_path: Path) -> None:
    p = spec(tmp_path, ["python", str(FAIL), "raise"], "raise")
    a = run_attempt(p, "raise", tmp_path / "runs")
    error, rec = a.doc()["error"], a.doc()["attempts"][-1]
    assert a.code == 1, error  # the program's own failure: not restarted
    assert "killed_worker" not in rec["program"]
    assert error.startswith("training.command exited 1: ")
    assert "ValueError: loss is nan at step 3;" in error, error


TORCHRUN_REPORT = """\
[rank1]: ValueError: loss is nan at step 3
E1128 21:38:44.395000 16047 api.py:1002] failed (exitcode: 1) local_rank: 1 (pid: 16054)
Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/torch/distributed/run.py", line 1032, in <module>
    main()
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:{space}
=======================================================
train.py FAILED
-------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-28_21:38:44
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 16053)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 16053
-------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-28_21:38:44
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : {code} (pid: 16054)
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
=======================================================
"""


def test_the_error_line_skips_progress_bars_and_separators() -> None:
    report = TORCHRUN_REPORT.format(code=1, space=" ").splitlines()
    assert error_line(report) == "[rank1]: ValueError: loss is nan at step 3"
    assert error_line(["step 3", "\r 10%|#  | 1/10 [00:01<00:09, 1.0it/s]\r 20%|##", ""]) == (
        "step 3"
    )
    assert error_line(["loss is nan", "-----", "  ", "\x1b[31m=====\x1b[0m"]) == "loss is nan"
    assert error_line(["RuntimeError: first", "ok", "AssertionError", "done"]) == "AssertionError"
    assert error_line([]) == ""


def test_the_root_cause_of_a_torchrun_report_names_the_signal() -> None:
    killed = killed_worker(TORCHRUN_REPORT.format(code=-9, space=" ").splitlines())
    assert killed is not None and killed.signum == 9 and killed.who == "rank 1 (pid 16054)"
    # the root cause exited by itself: the other rank's SIGTERM (torchrun's) does not count
    assert killed_worker(TORCHRUN_REPORT.format(code=1, space=" ").splitlines()) is None
    spawned = ["torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated "
               "with signal SIGKILL"]  # fmt: skip
    assert killed_worker(spawned) == KilledWorker("process 1", 9)
