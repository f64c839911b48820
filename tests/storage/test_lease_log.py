"""A lease taken after its holder released it is an ordinary hand-over, not a take-over of a
lapsed holder: only the second earns the warning (the queue's ledger lock and every resumed
attempt logged "took over the lapsed ..." after a clean release)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from burst.lease import Lease
from burst.storage import open_store


def test_released_is_handed_over_quietly_and_lapsed_is_taken_over_loudly(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = open_store(f"file://{tmp_path}")
    first = Lease(store, "lock.json", "a", "the test lock", ttl=0.05, settle=0.0)
    first.acquire()
    first.release()
    caplog.set_level(logging.WARNING, logger="burst.lease")
    # b never renews nor releases: ttl 0, lapsed at once
    taken = Lease(store, "lock.json", "b", "the test lock", ttl=0.0, settle=0.0).acquire()
    assert taken is not None and taken["holder"] == "a"
    assert not [r for r in caplog.records if "took over" in r.getMessage()]

    Lease(store, "lock.json", "c", "the test lock", ttl=0.05, settle=0.0).acquire()
    assert [r.getMessage() for r in caplog.records] == ["took over the lapsed the test lock from b"]
