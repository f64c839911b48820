"""Teardown confirms the final checkpoint sync (bounded wait) before the node group goes."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import torch

from burst.checkpoint import CheckpointManager
from burst.infra.ckptsync import confirm_checkpoint_sync, expected_step
from burst.spec import load_spec
from burst.storage import open_store
from burst.storage.location import run_url


def _job(quickstart_in: Path):  # type: ignore[no-untyped-def]
    return load_spec(quickstart_in)


def _attempt(store_url: str, record: dict) -> None:
    open_store(store_url).put_bytes("train/attempts/0001.json", json.dumps(record).encode())


def test_waits_for_the_save_in_flight_then_confirms(quickstart_in: Path) -> None:
    job = _job(quickstart_in)
    url = run_url(job.storage.checkpoint_uri, "sync-1")
    with CheckpointManager(url) as mgr:
        mgr.save(10, {"w": torch.zeros(64)}, tier="full")
        mgr.wait()
        _attempt(
            url,
            {
                "attempt": 1,
                "outcome": "preempted",
                "emergency_save": {"tier": "full", "in_flight_step": 12},
            },
        )

        def late_upload() -> None:  # the save the preempted attempt left on its way
            time.sleep(1.0)
            mgr.save(12, {"w": torch.ones(64)}, tier="full")
            mgr.wait()

        t = threading.Thread(target=late_upload)
        t.start()
        doc = confirm_checkpoint_sync(job, "sync-1", wait_s=30, poll_s=0.1)
        t.join()
    assert doc["confirmed"] is True
    assert doc["expected_step"] == 12 and doc["latest"]["step"] == 12
    assert doc["waited_s"] >= 0.9


def test_unconfirmed_sync_is_reported_after_the_bounded_wait(quickstart_in: Path) -> None:
    job = _job(quickstart_in)
    url = run_url(job.storage.checkpoint_uri, "sync-2")
    with CheckpointManager(url) as mgr:
        mgr.save(10, {"w": torch.zeros(64)}, tier="full")
        mgr.wait()
    _attempt(
        url,
        {
            "attempt": 1,
            "outcome": "preempted",
            "emergency_save": {"tier": "full", "in_flight_step": 12},
        },
    )
    doc = confirm_checkpoint_sync(job, "sync-2", wait_s=0.3, poll_s=0.1)
    assert doc["confirmed"] is False
    assert doc["latest"]["step"] == 10 and doc["expected_step"] == 12


def test_nothing_to_wait_for_without_a_training_attempt(quickstart_in: Path) -> None:
    doc = confirm_checkpoint_sync(_job(quickstart_in), "never-trained", wait_s=5)
    # nothing to sync is not a confirmed sync (issue 16: never `confirmed: true` with
    # `expected_step: null`)
    assert doc["confirmed"] is None and doc["expected_step"] is None
    assert doc["waited_s"] < 5


def test_expected_step_of_a_finished_attempt() -> None:
    assert expected_step([{"outcome": "done", "ended_at_step": 30}]) == 30
    assert expected_step([{"outcome": "failed", "ended_at_step": 7}]) is None
    # an attempt killed (its record left open) or failed: the save it handed off last
    assert expected_step([{"outcome": "running", "at_step": 9, "saving_step": 8}]) == 8
    assert expected_step([{"outcome": "failed", "saving_step": 10}]) == 10


def test_a_final_checkpoint_with_a_corrupt_chunk_is_not_a_confirmed_sync(
    quickstart_in: Path,
) -> None:
    from burst.checkpoint import load_manifest
    from burst.checkpoint.manifest import chunk_key

    job = _job(quickstart_in)
    url = run_url(job.storage.checkpoint_uri, "sync-rot")
    with CheckpointManager(url, chunk_size=1024) as mgr:
        mgr.save(10, {"w": torch.zeros(512)}, tier="full")
        mgr.wait()
        mgr.save(12, {"w": torch.ones(512)}, tier="full")
        mgr.wait()
    _attempt(url, {"attempt": 1, "outcome": "done", "ended_at_step": 12})
    store = open_store(url)
    ref = mgr.latest()
    assert ref is not None and ref.step == 12
    digest = load_manifest(store, ref).chunks[0].digest
    data = bytearray(store.get_bytes(chunk_key(digest)))
    data[7] ^= 0x01
    store.put_bytes(chunk_key(digest), bytes(data))
    doc = confirm_checkpoint_sync(job, "sync-rot", wait_s=0.3, poll_s=0.1)
    # the manifest is there, but the checkpoint does not restore: not a confirmed sync
    assert doc["latest"]["step"] == 12 and doc["verified"] is False
    assert doc["confirmed"] is False
    assert "1 corrupt chunk" in doc["error"]
    assert doc["restorable"] == {"step": 10, "tier": "full"}
    assert not store.exists(chunk_key(digest))  # quarantined: a later save uploads it again
