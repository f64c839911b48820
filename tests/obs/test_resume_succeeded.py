"""`burst resume` of a run that succeeded is refused before anything is rented (issue 46: one
vocabulary of endings, where succeeded's next command is none; "fail before renting"). Before:
it provisioned the run's nodes again, trained no step from its final checkpoint, tore down and
billed the rented time."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_run import RUN_ID

from burst.errors import EXIT_REFUSED

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_a_succeeded_run_has_nothing_to_resume(run_dir: Path, burst_cli: Cli) -> None:
    before = sorted(p.name for p in run_dir.iterdir())
    proc = burst_cli(["resume", RUN_ID])
    assert proc.returncode == EXIT_REFUSED, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert f"run {RUN_ID} succeeded (it trained to step 30): nothing to resume" in line, line
    assert proc.stdout == ""  # no run id: no run was started
    assert sorted(p.name for p in run_dir.iterdir()) == before  # nothing written, no pods
