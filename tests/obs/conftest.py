"""Fixtures for the observability tests; the run directory they build is in obs_run.py (a
module of its own, imported by name: a `from conftest import ...` resolves to whichever
conftest pytest imported first when several folders are collected together)."""

from __future__ import annotations

from pathlib import Path

import pytest
from obs_run import make_run


@pytest.fixture
def runs_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "runs"
    root.mkdir()
    monkeypatch.setenv("BURST_RUNS_ROOT", str(root))
    return root


@pytest.fixture
def run_dir(runs_root: Path) -> Path:
    return make_run(runs_root)
