"""`burst status` in words a person reads (issue 46, "Output"): each train attempt's line says
how it ended and, when something ended it, what; an attempt nothing ended names nothing.
Before: "train attempt 2: done at step 30, -"."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_run import RUN_ID

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_each_attempt_line_says_what_ended_it_or_nothing(run_dir: Path, burst_cli: Cli) -> None:
    proc = burst_cli(["status", RUN_ID])
    assert proc.returncode == 0, proc.stderr
    lines = [ln.strip() for ln in proc.stdout.splitlines() if "train attempt" in ln]
    assert lines[0].startswith("train attempt 1: preempted at step 7, ended by "), lines
    assert lines[1] == "train attempt 2: done", lines
    assert not any(ln.endswith("-") or ", -" in ln for ln in lines), lines
