"""Run attempts of the train step as real child processes, cheaply.

Each attempt is a real process (``os.fork``) running ``burst.steps.train`` exactly as
``python -m burst.steps.train`` would (same ``stepio.main``), with its own signal handlers and exit
code; forking from a parent that has already imported torch saves the ~3 s of interpreter and
torch start-up a fresh process costs here. Children use one torch thread, so every attempt of
every trial computes with the same reductions.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

import burst.steps.train
import burst.train.example
import burst.train.loop
from burst.checkpoint import CheckpointRef
from burst.preempt.signals import NOTICE_SIGNALS, watch_from_start
from burst.spec import load_spec
from burst.stepio import main as step_main
from burst.train.checkpoints import RunCheckpoints

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"

torch.use_deterministic_algorithms(True)  # its first call imports torch._inductor (~2 s)
with contextlib.suppress(ImportError):  # the catalog (the interval's MTBF), when it is there
    import burst.plan.catalog


def write_spec(
    tmp: Path,
    steps: int = 30,
    interval: int | str = 5,
    full_every: int = 2,
    name: str = "spec.yaml",
) -> Path:
    text = QUICKSTART.read_text()
    for old, new in (
        ("checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store"),
        ("  steps: 30\n", f"  steps: {steps}\n"),
        ("interval_steps: 5", f"interval_steps: {interval}"),
        ("full_every: 2", f"full_every: {full_every}"),
    ):
        assert old in text, old
        text = text.replace(old, new)
    p = tmp / name
    p.write_text(text)
    return p


@dataclass
class Attempt:
    pid: int
    out: Path
    code: int | None = None

    def wait(self, timeout: float = 120.0) -> int:
        end = time.monotonic() + timeout
        while True:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.code = os.waitstatus_to_exitcode(status)
                return self.code
            if time.monotonic() > end:
                os.kill(self.pid, signal.SIGKILL)
                os.waitpid(self.pid, 0)
                raise TimeoutError(f"attempt {self.pid} did not finish in {timeout}s")
            time.sleep(0.01)

    def wait_until_watching(self, timeout: float = 60.0) -> bool:
        """Wait until the child catches SIGTERM (from its start, as the train step does);
        False if it ended."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                status = Path(f"/proc/{self.pid}/status").read_text()
            except OSError:
                return False
            if "State:\tZ" in status:
                return False
            caught = int(
                next(ln for ln in status.splitlines() if ln.startswith("SigCgt:")).split()[1], 16
            )
            if caught & (1 << (signal.SIGTERM - 1)):
                return True
            time.sleep(0.005)
        return False

    def doc(self) -> dict[str, Any]:
        return json.loads(self.out.read_text())  # type: ignore[no-any-return]


def start_attempt(
    spec: Path,
    run_id: str,
    runs_root: Path,
    env: dict[str, str] | None = None,
    own_group: bool = False,
) -> Attempt:
    """Fork one attempt; ``own_group`` puts it in a new process group (its pgid = its pid)."""
    out = runs_root / f"{run_id}-out-{time.monotonic_ns()}.json"
    argv = [
        "--spec",
        str(spec),
        "--run-id",
        run_id,
        "--runs-root",
        str(runs_root),
        "--out",
        str(out),
    ]
    sys.stdout.flush()
    sys.stderr.flush()
    # The child starts with the notice signals held: until it catches them as the step's
    # first act does (watch_from_start, which lets them through), a SIGTERM waits, never
    # meeting a handler this process had (an earlier test's) or the default action
    held = signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)
    pid = os.fork()
    if pid:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    if pid == 0:  # the child: one attempt of the train step, then exit with its code
        code = 1
        try:
            watch_from_start()  # as python -m burst.steps.train does first
            if own_group:
                os.setpgid(0, 0)
            os.environ.update(env or {})
            torch.set_num_threads(1)
            code = step_main("train", burst.steps.train.run, argv)
        finally:
            sys.stderr.flush()
            os._exit(code)
    return Attempt(pid, out)


def run_attempt(
    spec: Path, run_id: str, runs_root: Path, env: dict[str, str] | None = None
) -> Attempt:
    a = start_attempt(spec, run_id, runs_root, env)
    a.wait()
    return a


def committed(spec: Path, run_id: str) -> list[CheckpointRef]:
    """The committed checkpoints of a run, read through the train loop's own store."""
    store = RunCheckpoints(load_spec(spec), run_id)
    try:
        return store.refs()
    finally:
        store.close()


def load_checkpoint(spec: Path, run_id: str, ref: CheckpointRef) -> dict[str, Any]:
    """Restore (and so verify every chunk of) one committed checkpoint."""
    store = RunCheckpoints(load_spec(spec), run_id)
    try:
        return store.load(ref)
    finally:
        store.close()
