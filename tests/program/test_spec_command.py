"""training.command in the spec: exactly one of entrypoint and command, its options, the
schema, and `burst validate`'s check that the program exists and starts (before renting)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from burst.errors import SpecError
from burst.program.process import expand, program_argv, program_env
from burst.spec import json_schema, parse_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "own-program-torchrun.yaml"


def spec_text(training: str) -> str:
    text = EXAMPLE.read_text()
    start, end = text.index("training:"), text.index("budget:")
    return text[:start] + training + text[end:]


def test_the_example_is_valid_and_a_program() -> None:
    job = parse_spec(EXAMPLE.read_text())
    assert job.training.own_program and job.training.launcher == "torchrun"
    assert job.training.notice_signal == "SIGUSR1"
    assert job.training.checkpoint.expect_within_s == 600


@pytest.mark.parametrize(
    ("training", "expected"),
    [
        (
            "training:\n  entrypoint: burst.train.example:build\n  command: [x]\n  steps: 3\n",
            "training: set entrypoint (burst's loop) or command (your own program), not both",
        ),
        ("training:\n  command: []\n  steps: 3\n", "training.command: List should have at least"),
        ("training:\n  launcher: torchrun\n  steps: 3\n", "launcher applies to training.command"),
        (
            "training:\n  command: [x]\n  notice_signal: SIGKILL\n  steps: 3\n",
            "training.notice_signal: must be one of SIGUSR1",
        ),
        (
            "training:\n  command: [x]\n  engine: deepspeed\n  steps: 3\n",
            "engine applies to training.entrypoint only",
        ),
    ],
)
def test_bad_training_is_one_line(training: str, expected: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec(spec_text(training), "s.yaml")
    assert len(exc.value.problems) == 1
    assert expected in exc.value.problems[0], exc.value.problems
    assert exc.value.problems[0].startswith("s.yaml:")


def test_schema_says_exactly_one() -> None:
    training = json_schema()["$defs"]["Training"]
    assert training["not"] == {"required": ["entrypoint", "command"]}
    for field in ("command", "launcher", "notice_signal"):
        assert field in training["properties"]
    assert "expect_within_s" in json_schema()["$defs"]["CheckpointPolicy"]["properties"]


def test_argv_under_torchrun_and_the_environment(tmp_path: Path) -> None:
    job = parse_spec(EXAMPLE.read_text())
    argv = program_argv(job)
    assert argv[1:4] == ["-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in argv
    assert argv[argv.index("--max-restarts=0") + 1] == "examples/programs/torchrun_train.py"
    env = program_env(job, "r-1", tmp_path / "c", tmp_path / "n.json", tmp_path / "c/x", 1e9)
    assert env["BURST_CHECKPOINT_DIR"] == str(tmp_path / "c")
    assert env["BURST_RESUME_FROM"] == str(tmp_path / "c/x")
    assert env["BURST_NOTICE_SIGNAL"] == "SIGUSR1"
    assert env["BURST_STEP_DEADLINE"] == "1000000000"
    assert (env["NNODES"], env["NPROC_PER_NODE"], env["NODE_RANK"]) == ("1", "2", "0")
    assert env["SKYPILOT_NUM_NODES"] == "1" and env["BURST_RUN_ID"] == "r-1"
    plain = parse_spec(spec_text("training:\n  command: [python, -m, pkg.train]\n  steps: 3\n"))
    assert program_argv(plain)[1:] == ["-m", "pkg.train"]  # python: burst's interpreter
    argv = expand(["--out", "$BURST_CHECKPOINT_DIR/x", "${NODE_RANK}", "$HOME", "50$"], env)
    assert argv == ["--out", f"{tmp_path}/c/x", "0", "$HOME", "50$"]  # contract names only


def _validate(burst_cli, tmp_path: Path, command: list[str]):  # type: ignore[no-untyped-def]
    text = spec_text(f"training:\n  command: {json.dumps(command)}\n  steps: 3\n").replace(
        "file://checkpoints", f"file://{tmp_path}/store"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    return burst_cli(["validate", str(spec)])


def test_validate_refuses_a_missing_or_unstartable_program(burst_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _validate(burst_cli, tmp_path, ["no-such-program-here", "--x"])
    assert r.returncode == 2, r.stderr
    assert "training.command: 'no-such-program-here' is not found" in r.stderr
    script = tmp_path / "train.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    r = _validate(burst_cli, tmp_path, [str(script)])
    assert r.returncode == 2 and "is not executable" in r.stderr, r.stderr
    os.chmod(script, script.stat().st_mode | stat.S_IXUSR)
    r = _validate(burst_cli, tmp_path, [str(script)])
    assert r.returncode == 0 and "command starts" in r.stdout, r.stderr
    py = tmp_path / "t.py"
    py.write_text("import not_a_module_anywhere_xyz\nraise SystemExit('must never run')\n")
    r = _validate(burst_cli, tmp_path, ["python", str(py)])
    assert r.returncode == 2, r.stderr
    assert "not installed: not_a_module_anywhere_xyz" in r.stderr
    r = _validate(burst_cli, tmp_path, ["python", str(tmp_path / "absent.py")])
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = _validate(burst_cli, tmp_path, ["python", "-m", "json.tool"])
    assert r.returncode == 0, r.stderr
