"""The checkout (or installed tree) burst runs from, computed once.

Its ``policies/``, ``terraform/`` and ``pipelines/compiled/`` are the embedded defaults; the
steps' processes get it on their ``PYTHONPATH``. Settings (``BURST_POLICIES``,
``BURST_TERRAFORM_DIR``) override the directories, never this root.
"""

from __future__ import annotations

from pathlib import Path

#: The directory holding the ``burst`` package (and ``steps``, ``pipelines``, ``policies``).
ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "policies"
TERRAFORM = ROOT / "terraform"
COMPILED = ROOT / "pipelines" / "compiled"
