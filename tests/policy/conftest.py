"""Fixtures for the legal-preflight tests: specs built from the quickstart, policy copies."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from policy_helpers import POLICIES, add_signoff

from burst.policy import PolicySet, load_policies


@pytest.fixture(scope="session")
def shipped() -> PolicySet:
    return load_policies(POLICIES)


@pytest.fixture(scope="session")
def matrix_policies(tmp_path_factory: pytest.TempPathFactory) -> PolicySet:
    """The shipped policies plus the test-only sign-off for specs named SIGNED."""
    dest = tmp_path_factory.mktemp("matrix") / "policies"
    shutil.copytree(POLICIES, dest, ignore=shutil.ignore_patterns("keys", "admission"))
    add_signoff(dest)
    return load_policies(dest)


@pytest.fixture
def policy_copy(tmp_path: Path) -> Path:
    """A private copy of the shipped policies to edit (facts, rules, exceptions), with the
    test-only sign-off for specs named SIGNED (policy_helpers.SIGNOFF)."""
    dest = tmp_path / "policies"
    shutil.copytree(POLICIES, dest, ignore=shutil.ignore_patterns("keys", "admission"))
    add_signoff(dest)
    return dest


@pytest.fixture
def edit_yaml() -> Callable[[Path, Callable[[Any], None]], None]:
    def edit(path: Path, change: Callable[[Any], None]) -> None:
        data = yaml.safe_load(path.read_text())
        change(data)
        path.write_text(yaml.safe_dump(data, sort_keys=False))

    return edit
