"""The notice reaches every process of a program that handles it, wherever its launcher put
it: a plain process tree, a shell wrapper, workers in sessions or process groups of their own
(torchrun's, or ones that call setsid / setpgid themselves), a worker whose parent died, real
torchrun (its agent never signalled, even where it catches the signal). Stopping the program
ends every one of them. Real processes and signals (tests/program/tree_prog.py)."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.program import tree
from burst.program.process import Program

pytestmark = [pytest.mark.slow]
PROG = Path(__file__).resolve().parent / "tree_prog.py"
PY = sys.executable
TORCHRUN = [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]
#: torch's elastic agent run in-process by another command (as ``accelerate launch`` does)
IN_PROCESS_AGENT = [PY, "-c", "from torch.distributed.run import main; main()",
                    "--standalone", "--nproc-per-node=2"]  # fmt: skip
#: torchrun's agent catching SIGUSR1 too: signalled, it would tear its workers down
AGENT_ENV = {"TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGUSR1"}

CASES = {
    "plain-tree": ([PY, str(PROG), "plain"], 2, {}),
    "shell-wrapper": (["sh", "-c", f'"{PY}" "{PROG}" plain "$0"; echo done'], 2, {}),
    "sessions-of-their-own": ([PY, str(PROG), "sessions"], 2, {}),
    "setsid-and-setpgid-themselves": ([PY, str(PROG), "own-groups"], 2, {}),
    "parent-died": ([PY, str(PROG), "orphan"], 1, {}),
    "torchrun": ([*TORCHRUN, str(PROG), "worker"], 2, AGENT_ENV),
    "in-process-agent": ([*IN_PROCESS_AGENT, str(PROG), "worker"], 2, AGENT_ENV),
}


def alive(pid: int) -> bool:
    return tree.stat(pid) is not None


def wait_for(what: str, cond: Callable[[], bool], timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.05)


def pids(out: Path, prefix: str) -> set[int]:
    return {int(p.name.removeprefix(prefix)) for p in out.glob(f"{prefix}*")}


@pytest.mark.parametrize("case", list(CASES))
def test_the_notice_reaches_every_process_that_handles_it(tmp_path: Path, case: str) -> None:
    argv, workers, extra = CASES[case]
    out = tmp_path / "out"
    out.mkdir()
    argv = [*argv, str(out)]
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCHELASTIC")}
    program = Program(argv, {**env, **extra}, tmp_path / "program.log")
    try:
        wait_for(f"{workers} workers", lambda: len(pids(out, "ready-")) == workers)
        ready = pids(out, "ready-")
        sent = program.notify("SIGUSR1")
        assert {p.pid for p in sent} == ready, [(p.pid, p.command()) for p in sent]
        wait_for("every worker's handler", lambda: pids(out, "got-") == ready)
        # nothing else was signalled: the launcher (and the shell) trains on, not killed
        time.sleep(0.3)
        assert program.poll() is None, program.tail
        assert all(alive(pid) for pid in ready)
        assert program.notify("SIGUSR1", skip=ready) == []  # nobody new to tell
    finally:
        program.stop(1.0)
    # stopping the program ended all of it, workers of their own session included
    wait_for("the workers to end", lambda: not any(alive(pid) for pid in ready), 10)


def test_a_forked_child_that_inherits_the_handler_gets_the_notice_too(tmp_path: Path) -> None:
    """A fork keeps the handler (a DataLoader worker started by fork): it catches the signal,
    so it gets it as its parent does (as under Slurm), and is not killed by it."""
    out = tmp_path / "out"
    out.mkdir()
    program = Program([PY, str(PROG), "inherit", str(out)], dict(os.environ), tmp_path / "l")
    try:
        wait_for("parent and child", lambda: len(pids(out, "ready-")) == 2)
        sent = program.notify("SIGUSR1")
        assert {p.pid for p in sent} == pids(out, "ready-")
        wait_for("both handlers", lambda: pids(out, "got-") == pids(out, "ready-"))
    finally:
        program.stop(1.0)


def test_a_process_without_a_handler_is_never_signalled(tmp_path: Path) -> None:
    program = Program([PY, "-c", "import time; time.sleep(60)"], dict(os.environ), tmp_path / "l")
    try:
        assert program.notify("SIGUSR1") == []
        assert program.poll() is None
    finally:
        assert program.stop(1.0) == 128 + signal.SIGTERM


def test_a_script_named_torchrun_something_is_no_launcher() -> None:
    assert tree.runs_launcher(["/usr/bin/torchrun", "--nproc-per-node=2", "train.py"])
    assert tree.runs_launcher([PY, "-m", "torch.distributed.run", "train.py"])
    assert tree.runs_launcher([PY, "-u", "/venv/bin/torchrun", "train.py"])
    assert tree.runs_launcher([PY, "-W", "ignore", "-mtorch.distributed.run", "train.py"])
    assert not tree.runs_launcher([PY, "-u", "examples/programs/torchrun_train.py"])
    assert not tree.runs_launcher([PY, "-m", "torchrun_tools.train"])
    assert not tree.runs_launcher(["sh", "-c", "torchrun train.py"])
