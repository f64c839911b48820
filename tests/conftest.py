"""Shared test fixtures."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from s3server import s3_bucket, s3_server  # noqa: F401  (shared fixtures)

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private runs root (and checkpoint store) for one test."""
    root = tmp_path / "runs"
    monkeypatch.setenv("BURST_RUNS_ROOT", str(root))
    return root


@pytest.fixture
def burst_cmd() -> list[str]:
    return [sys.executable, "-m", "burst.cli.main"]


@pytest.fixture
def quickstart_in(tmp_path: Path) -> Path:
    """The quickstart spec, with its checkpoint store moved into the test's tmp dir."""
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://runs/checkpoints", f"checkpoint_uri: file://{tmp_path}/store"
    )
    p = tmp_path / "quickstart.yaml"
    p.write_text(text)
    return p


@pytest.fixture(autouse=True)
def _repo_cwd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
