"""Fixtures for the legal-preflight tests: specs built from the quickstart, policy copies."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_helpers import POLICIES

from burst.policy import PolicySet, load_policies


@pytest.fixture(scope="session")
def shipped() -> PolicySet:
    return load_policies(POLICIES)


@pytest.fixture
def policy_copy(tmp_path: Path) -> Path:
    """A private copy of the shipped policies to edit (facts, rules, exceptions)."""
    dest = tmp_path / "policies"
    shutil.copytree(POLICIES, dest, ignore=shutil.ignore_patterns("keys", "admission"))
    return dest


@pytest.fixture
def edit_yaml() -> Callable[[Path, Callable[[Any], None]], None]:
    def edit(path: Path, change: Callable[[Any], None]) -> None:
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    return edit
