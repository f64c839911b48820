"""Not collected by the suite (no ``test_`` prefix): tests/skeleton/test_parallel_groups.py runs
it under pytest-xdist to see that a module-scoped fixture is set up once."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="module")
def shared() -> int:
    with open(os.environ["PROBE_LOG"], "a", encoding="utf-8") as f:
        f.write(f"set up on {os.environ.get('PYTEST_XDIST_WORKER')}\n")
    return 1


@pytest.mark.parametrize("n", range(6))
def test_uses_the_shared_fixture(shared: int, n: int) -> None:
    assert shared == 1
