"""make test runs in parallel (pytest-xdist, ``--dist loadgroup``), and tests/conftest.py keeps
the tests of a file that share a module-scoped fixture (a pipeline run, a server) on one worker,
so the fixture is set up once. With pytest 9 (node ids read from ``_id``) xdist 3.8's group
suffix was silently lost: every such fixture ran once per worker (the shared quickstart runs
three times in one make test). This runs a probe module under three workers and counts."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # three pytest workers: real processes
REPO = Path(__file__).resolve().parents[2]


def test_a_files_shared_fixture_is_set_up_once_across_workers(tmp_path: Path) -> None:
    log = tmp_path / "setups.log"
    probe = Path(__file__).with_name("probe_groups.py").relative_to(REPO)
    cmd = [sys.executable, "-m", "pytest", "-q", "-n", "3", "--dist", "loadgroup"]
    cmd += ["-p", "no:cacheprovider", str(probe)]
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env={**os.environ, "PROBE_LOG": str(log)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "6 passed" in proc.stdout, proc.stdout[-2000:]
    assert len(log.read_text().splitlines()) == 1, log.read_text()
