"""Helpers for the legal-preflight tests (imported by conftest and the tests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from burst.spec import BurstJob

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def job_from(over: dict[str, Any]) -> BurstJob:
    """The quickstart spec with ``over`` merged in (lists replace)."""
    base = yaml.safe_load(QUICKSTART.read_text())
    return BurstJob.model_validate(merge(base, over))
