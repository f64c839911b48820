"""Corrupt or missing chunks and manifests are detected, named, and restore falls back."""

from __future__ import annotations

import pytest
import torch
from ckpt_helpers import assert_same

from burst.checkpoint import CheckpointError, CheckpointManager, load_manifest
from burst.checkpoint.manifest import chunk_key
from burst.storage import ObjectStore


def state_for(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"model": {"w": torch.randn(64, 1024, generator=g)}, "step": step}


def two_checkpoints(store: ObjectStore) -> tuple[CheckpointManager, dict[int, dict]]:
    saved = {1: state_for(1), 2: state_for(2)}
    mgr = CheckpointManager(store, chunk_size=64 << 10)
    for step, state in saved.items():
        mgr.save(step, state)
        mgr.wait()
    return mgr, saved


def unique_chunk(store: ObjectStore, step: int, other: int) -> str:
    """A chunk of checkpoint ``step`` that checkpoint ``other`` does not share."""
    mgr = CheckpointManager(store, start_worker=False)
    mine, theirs = (load_manifest(store, r) for r in mgr.checkpoints() if r.step in (step, other))
    if mine.step != step:
        mine, theirs = theirs, mine
    shared = {c.digest for c in theirs.chunks}
    return next(c.digest for c in mine.chunks if c.digest not in shared)


def test_corrupt_chunk_is_named_and_restore_falls_back(store: ObjectStore) -> None:
    mgr, saved = two_checkpoints(store)
    digest = unique_chunk(store, 2, 1)
    data = bytearray(store.get_bytes(chunk_key(digest)))
    data[len(data) // 2] ^= 0x01  # one flipped bit
    store.put_bytes(chunk_key(digest), bytes(data))
    with pytest.raises(CheckpointError) as err:
        mgr.restore(2)
    line = err.value.one_line()
    assert "checkpoint step 2 (full)" in line and "corrupt" in line and digest[:16] in line
    restored = mgr.restore()  # newest first, falls back to step 1
    assert restored.step == 1
    assert_same(restored.state, saved[1])
    mgr.close()


def test_missing_chunk_is_named(local_store: ObjectStore) -> None:
    mgr, _ = two_checkpoints(local_store)
    digest = unique_chunk(local_store, 2, 1)
    local_store.delete([chunk_key(digest)])
    with pytest.raises(CheckpointError, match=r"step 2 \(full\): chunk .* is missing"):
        mgr.restore(2)
    assert mgr.restore().step == 1
    with pytest.raises(CheckpointError):
        mgr.restore(fallback=False)
    mgr.close()


def test_corrupt_manifest_is_detected(local_store: ObjectStore) -> None:
    mgr, saved = two_checkpoints(local_store)
    ref = mgr.latest()
    assert ref is not None
    text = local_store.get_bytes(ref.key).replace(b'"step":2', b'"step":3')
    local_store.put_bytes(ref.key, text)
    with pytest.raises(CheckpointError, match="manifest checksum mismatch"):
        mgr.restore(2)
    assert_same(mgr.restore().state, saved[1])
    mgr.close()


def test_nothing_usable_is_one_clear_error(local_store: ObjectStore) -> None:
    mgr = CheckpointManager(local_store)
    with pytest.raises(CheckpointError, match="no committed checkpoint") as err:
        mgr.restore()
    assert err.value.exit_code == 2
    with pytest.raises(CheckpointError, match="no committed checkpoint at step 7"):
        mgr.restore(7)
