"""A ``training.command`` that cannot start is one line from the train step whatever starts it
(issue 46, the held-out sibling of the missing program): under ``launcher: torchrun`` too. Before,
torchrun was started for a program that did not exist: each rank's ``FileNotFoundError``
traceback in the step's log and ``training.command exited 1`` (exit 1, retried as a failure),
where the same program without a launcher was one line, exit 2. The train step runs here as on
a cluster (``python -m burst.steps.train``), where preflight cannot see its environment."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from burst.errors import EXIT_BAD_INPUT

REPO = Path(__file__).resolve().parents[2]
TORCHRUN_SPEC = REPO / "examples" / "own-program-torchrun.yaml"
PROGRAM = "examples/programs/torchrun_train.py"


@pytest.mark.parametrize(
    ("program", "says"),
    [
        ("no-such-trainer-7c1", "'no-such-trainer-7c1' is not found"),
        ("no_such_train.py", "'no_such_train.py' is not found"),
        ("NOEXEC", "is not executable (chmod +x"),
    ],
)
def test_a_program_torchrun_cannot_start_is_one_bad_input_line(
    tmp_path: Path, program: str, says: str
) -> None:
    if program == "NOEXEC":
        script = tmp_path / "train.sh"
        script.write_text("#!/bin/sh\necho never\n")  # no execute bit
        program = str(script)
    text = TORCHRUN_SPEC.read_text()
    assert PROGRAM in text and "launcher: torchrun" in text
    text = text.replace(PROGRAM, program).replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp_path}/store"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    argv = ["--spec", str(spec), "--run-id", "np", "--runs-root", str(tmp_path / "runs")]
    proc = subprocess.run(
        [sys.executable, "-m", "burst.steps.train", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr[-3000:]
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert "training.command: " in last and says in last, last
    assert "the program did not start" in last
    assert "Traceback" not in proc.stderr and "FileNotFoundError" not in proc.stderr
    assert not (tmp_path / "runs" / "np" / "program" / "program.log").exists()  # nothing ran
