"""A directory under the runs root that holds no run is no run, for every command that takes
RUN (issue 46, live views from facts): the quickstart keeps its checkpoint store in
``runs/checkpoints``, which `burst runs` leaves out. Before: `burst status checkpoints` said
"checkpoints: unknown" and exited 0 (as if a run were going), `burst report checkpoints`
printed a report of run "checkpoints" and `burst logs checkpoints` printed nothing, exit 0."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.errors import EXIT_BAD_INPUT

Cli = Callable[..., subprocess.CompletedProcess[str]]


@pytest.mark.parametrize(
    "args",
    [["status"], ["status", "--json"], ["logs"], ["report"], ["report", "--json"], ["cancel"]],
)
def test_a_directory_that_holds_no_run_is_no_such_run(
    runs_root: Path, burst_cli: Cli, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.delenv("ARGO_SERVER", raising=False)
    store = runs_root / "checkpoints" / "quickstart-1"
    (store / "manifests").mkdir(parents=True)
    (store / "latest.json").write_text("{}")
    proc = burst_cli([args[0], "checkpoints", *args[1:], "--runs-root", str(runs_root)])
    assert proc.returncode == EXIT_BAD_INPUT, proc.stdout + proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(said) == 1 and "'checkpoints'" in said[0], proc.stderr
    assert proc.stdout == ""
    assert (store / "latest.json").read_text() == "{}"  # nothing touched
