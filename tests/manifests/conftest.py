"""Fixtures: the committed goldens, loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPILED = REPO / "pipelines" / "compiled"
GOLDENS = sorted(p.name for p in COMPILED.glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((COMPILED / name).read_text(encoding="utf-8"))


@pytest.fixture
def train() -> dict[str, Any]:
    return load("burst-train.yaml")


@pytest.fixture
def reaper() -> dict[str, Any]:
    return load("burst-reaper.yaml")
