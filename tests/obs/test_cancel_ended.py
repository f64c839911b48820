"""`burst cancel` of a local run with nothing to stop says how the run stands, in the words of
its ending (issue 46, one vocabulary of endings): one that ended names its ending and what
carries on; one whose runner is gone is lost and `burst down` destroys what it left (the
endings table's hint). Before: every such run was "no live runner ...; `burst reap` destroys
what a dead runner left", a succeeded run included."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from obs_run import RUN_ID, make_run

from burst.errors import EXIT_REFUSED

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize(
    ("with_report", "says"),
    [
        (True, "it ended succeeded (exit 0): every step succeeded"),
        (False, "it ended lost (exit 137): killed or lost"),
    ],
)
def test_nothing_to_stop_says_how_the_run_ended(
    runs_root: Path, burst_cli: Cli, with_report: bool, says: str
) -> None:
    make_run(runs_root, with_report=with_report)
    proc = burst_cli(["cancel", RUN_ID, "--runs-root", str(runs_root)])
    assert proc.returncode == EXIT_REFUSED, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert "nothing to stop" in line and says in line, line
    assert "burst reap" not in line
    if not with_report:
        assert f"next: `burst down {RUN_ID} --runs-root {runs_root}`" in line, line
