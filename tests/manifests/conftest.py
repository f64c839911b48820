"""Fixtures: the committed goldens, loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
COMPILED = REPO / "burst" / "pipelines" / "compiled"
GOLDENS = sorted(p.name for p in COMPILED.glob("*.yaml"))


def load(name: str) -> dict[str, Any]:
    return yaml.safe_load((COMPILED / name).read_text(encoding="utf-8"))


@pytest.fixture
def train() -> dict[str, Any]:
    return load("burst-train.yaml")


def workflow_templates() -> list[dict[str, Any]]:
    """The WorkflowTemplates among the goldens: what a workflowTemplateRef may call."""
    return [m for m in map(load, GOLDENS) if m["kind"] == "WorkflowTemplate"]


@pytest.fixture
def reaper() -> dict[str, Any]:
    """The reaper's WorkflowTemplate."""
    return load("burst-reaper.yaml")


@pytest.fixture
def reaper_cron() -> dict[str, Any]:
    """The CronWorkflow that calls it."""
    return load("burst-reaper-cron.yaml")
