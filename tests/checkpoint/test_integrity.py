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


def test_manifest_keeps_each_chunk_xxh3_beside_the_chunks_and_reads_older_ones() -> None:
    from burst.checkpoint.manifest import CHECKS_KEY, ChunkRef, Manifest

    chunks = [ChunkRef(0, 4, "a" * 64, "1" * 32), ChunkRef(64, 4, "b" * 64, "2" * 32)]
    m = Manifest(1, "full", "t", 64, 68, [], chunks, {})
    body = m.body()
    assert body["chunks"] == [[0, 4, "a" * 64], [64, 4, "b" * 64]]  # as older readers read it
    assert body[CHECKS_KEY] == ["1" * 32, "2" * 32]
    again = Manifest.from_bytes(m.to_bytes(), "here")
    assert [c.check for c in again.chunks] == ["1" * 32, "2" * 32]
    older = Manifest(1, "full", "t", 64, 68, [], [ChunkRef(0, 4, "a" * 64)], {})
    assert CHECKS_KEY not in older.body()
    assert Manifest.from_bytes(older.to_bytes(), "here").chunks[0].check is None


def test_restore_checks_the_recorded_xxh3_and_blake3_only_without_one(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The writer records each chunk's xxh3-128; a restore checks that (no blake3 on the way:
    ten times the CPU), falls back to the blake3 for a manifest without it, and a recorded
    xxh3 that does not match sound bytes is the manifest's fault: no quarantine."""
    import xxhash

    import burst.checkpoint.restore as restore_mod
    from burst.checkpoint.manifest import Manifest

    mgr, saved = two_checkpoints(local_store)
    ref = mgr.latest()
    assert ref is not None
    m = load_manifest(local_store, ref)
    for c in m.chunks:
        assert c.check == xxhash.xxh3_128_hexdigest(local_store.get_bytes(chunk_key(c.digest)))

    class NoBlake3:
        @staticmethod
        def blake3(data: object) -> object:
            raise AssertionError("blake3 computed on a restore with recorded xxh3")

    with monkeypatch.context() as patch:
        patch.setattr(restore_mod, "blake3", NoBlake3)
        assert_same(mgr.restore(2).state, saved[2])

    digest = unique_chunk(local_store, 2, 1)
    wrong = Manifest.from_bytes(local_store.get_bytes(ref.key), ref.key)
    for c in wrong.chunks:
        if c.digest == digest:
            c.check = "0" * 32
    local_store.put_bytes(ref.key, wrong.to_bytes())
    with pytest.raises(CheckpointError, match="manifest's xxh3 of chunk"):
        mgr.restore(2)
    assert local_store.exists(chunk_key(digest))  # the chunk's bytes are sound: kept

    older = Manifest.from_bytes(local_store.get_bytes(ref.key), ref.key)
    for c in older.chunks:
        c.check = None
    local_store.put_bytes(ref.key, older.to_bytes())
    assert_same(mgr.restore(2).state, saved[2])  # checked by blake3
    data = bytearray(local_store.get_bytes(chunk_key(digest)))
    data[len(data) // 2] ^= 0x01
    local_store.put_bytes(chunk_key(digest), bytes(data))
    with pytest.raises(CheckpointError, match="corrupt"):
        mgr.restore(2)
    assert not local_store.exists(chunk_key(digest))  # quarantined
    mgr.close()
