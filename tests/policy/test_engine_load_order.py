"""A process that evaluates the policies and then imports torch (a regional plan, a test run,
anything that trains after a preflight) keeps running: rego-cpp loaded before torch aborts
the interpreter at torch's import, so the engine loads torch first when it is installed."""

from __future__ import annotations

import subprocess
import sys

from burst.checkout import ROOT

PROGRAM = """
import sys
from burst.policy import load_policies
from burst.policy.engine import Engine
Engine(load_policies())
import torch
print("torch", torch.__version__, "regopy" in sys.modules)
"""


def test_policies_then_torch_in_one_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, cwd=ROOT, timeout=600
    )
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("torch ") and proc.stdout.strip().endswith("True")
