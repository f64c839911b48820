"""`python -m burst.steps.preflight` never trains, so it never imports torch (seconds at start-up):
the engine loads the C++ runtime before regopy instead (burst/policy/engine.py,
_load_regopy_safely; the order itself is tested in test_engine_load_order.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from burst.checkout import ROOT


def test_preflight_step_does_not_import_torch(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "burst.steps.preflight",
            "--spec",
            "examples/quickstart.yaml",
            "--run-id",
            "imports-1",
            "--runs-root",
            str(tmp_path / "runs"),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(out.read_text())["allowed"]  # it did evaluate the policies
    imported = {
        line.split("|")[-1].strip()
        for line in proc.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "regopy" in imported
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}
