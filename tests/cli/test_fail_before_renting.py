"""Fail before renting (issue 46): what the train step needs installed, and the program a
``training.command`` names, are checked by `burst validate` and by the preflight step where
train runs in the same environment, one line naming what to install or what is missing,
exit 2, nothing provisioned. Before: `burst validate` passed, `burst run` provisioned and
train failed with ``unexpected error: No module named 'deepspeed'`` (or ``FileNotFoundError``
for a missing program), exit 1.

The environment without the extras is a real one: a virtual environment made here whose
site-packages holds this one's packages except DeepSpeed, transformers and lightning (links,
no copies), so burst, the steps it starts and their children all run in it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from burst.installed import extra_for

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
HIDDEN = ("deepspeed", "transformers", "lightning", "pytorch_lightning", "lightning_fabric")


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The Python of an environment that lacks the [train] and [frameworks] extras."""
    root = tmp_path_factory.mktemp("no-extras")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    here = Path(next(p for p in sys.path if p.endswith("site-packages")))
    (there,) = root.glob("lib/python*/site-packages")
    for entry in here.iterdir():
        stem = re.split(r"[-.]", entry.name, maxsplit=1)[0].lower()
        if stem not in HIDDEN:
            (there / entry.name).symlink_to(entry)
    python = str(root / "bin" / "python")
    probe = "import importlib.util as u; print(u.find_spec('deepspeed'), u.find_spec('torch'))"
    out = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.startswith("None ") and "None" not in out.stdout.split(" ", 1)[1]
    return python


def _spec(tmp: Path, training: str) -> Path:
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store"
    )
    text = text.replace("  entrypoint: burst.train.example:build\n", training)
    p = tmp / "spec.yaml"
    p.write_text(text)
    return p


def _burst(python: str, *args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BURST_RUNS_ROOT": str(tmp / "runs")}
    return subprocess.run(
        [python, "-m", "burst.cli.main", *args],
        capture_output=True, text=True, env=env, cwd=tmp, timeout=300, check=False,
    )  # fmt: skip


def test_validate_names_the_extra_the_engine_needs(bare_python: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  entrypoint: burst.train.example:build\n  engine: deepspeed\n")
    proc = _burst(bare_python, "validate", str(spec), tmp=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "deepspeed" in ln]
    assert "training.engine" in line and bare_python in line, line
    assert "pip install 'burst-train[train]'" in line, line
    assert "Traceback" not in proc.stderr


def test_validate_names_the_framework_an_adapter_needs(bare_python: str, tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text("import os\nfrom burst.adapters.hf import BurstCallback\n")
    spec = _spec(tmp_path, f"  command: [python, {script}]\n")
    proc = _burst(bare_python, "validate", str(spec), tmp=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if "transformers" in ln]
    assert "training.command" in line and "burst.adapters.hf" in line, line
    assert "pip install 'burst-train[frameworks]'" in line, line


@pytest.mark.e2e
def test_burst_run_stops_at_preflight_without_the_engine(bare_python: str, tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  entrypoint: burst.train.example:build\n  engine: deepspeed\n")
    proc = _burst(bare_python, "run", str(spec), tmp=tmp_path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    _stopped_at_preflight(tmp_path, proc, "pip install 'burst-train[train]'")


@pytest.mark.e2e
def test_burst_run_stops_at_preflight_on_a_missing_program(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  command: [no-such-trainer-9f3e, --lr, '3e-4']\n")
    proc = _burst(sys.executable, "run", str(spec), tmp=tmp_path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    _stopped_at_preflight(tmp_path, proc, "'no-such-trainer-9f3e' is not found")


def _stopped_at_preflight(tmp: Path, proc: subprocess.CompletedProcess[str], says: str) -> None:
    (report,) = (tmp / "runs").glob("*/report.json")
    doc = json.loads(report.read_text())
    status = {s["name"]: s["status"] for s in doc["steps"]}
    assert status["preflight"] == "failed" and status["provision"] == "skipped", status
    assert status["train"] == "skipped", status
    (pre,) = [s for s in doc["steps"] if s["name"] == "preflight"]
    assert pre.get("exit_code") == 2, pre
    out = (proc.stdout + proc.stderr).splitlines()
    (line,) = [ln for ln in out if ln.startswith("failed at preflight")]
    assert says in line, line


def test_the_train_step_names_a_missing_program_as_bad_input(tmp_path: Path) -> None:
    """Where preflight cannot see the train step's environment (a cluster), train itself
    says it in one line: exit 2, not ``unexpected error: FileNotFoundError`` (exit 1)."""
    spec = _spec(tmp_path, "  command: [no-such-trainer-9f3e]\n")
    argv = ["--spec", str(spec), "--run-id", "np", "--runs-root", str(tmp_path / "runs")]
    proc = subprocess.run(
        [sys.executable, "-m", "burst.steps.train", *argv],
        capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = [ln for ln in proc.stderr.splitlines() if ln.strip()][-1]
    assert "training.command: 'no-such-trainer-9f3e' is not found" in last, last
    assert "unexpected error" not in proc.stderr and "Traceback" not in proc.stderr


def test_the_hint_names_the_extra_pyproject_defines() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    for dist in ("deepspeed", "transformers", "lightning"):
        (named,) = [
            e for e, reqs in extras.items() if e != "test" and any(r.startswith(dist) for r in reqs)
        ]
        assert extra_for(dist) == named, dist
