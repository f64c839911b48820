"""Retention keeps the newest K full / L weights checkpoints and every chunk they reference;
GC is safe while a save is in flight."""

from __future__ import annotations

import json
import threading

import torch
from ckpt_helpers import assert_same

from burst.checkpoint import (
    CheckpointManager,
    apply_retention,
    collect_garbage,
    list_checkpoints,
    load_manifest,
)
from burst.checkpoint.manifest import CHUNK_PREFIX
from burst.checkpoint.retention import select_expired
from burst.storage import ObjectStore


def state_for(step: int, frozen: torch.Tensor) -> dict:
    g = torch.Generator().manual_seed(step)
    # a frozen part shared by every checkpoint and a part that changes each step
    return {"model": {"frozen": frozen, "head": torch.randn(32, 1024, generator=g)}, "step": step}


def referenced(store: ObjectStore) -> set[str]:
    return {c.digest for r in list_checkpoints(store) for c in load_manifest(store, r).chunks}


def test_retention_keeps_k_full_l_weights_and_their_chunks(store: ObjectStore) -> None:
    frozen = torch.randn(64, 1024)
    saved = {}
    with CheckpointManager(store, chunk_size=64 << 10, keep_full=2, keep_weights=3) as mgr:
        for step in range(1, 11):
            tier = "full" if step % 4 == 0 else "weights"
            saved[step] = state_for(step, frozen)
            mgr.save(step, saved[step], tier=tier)
            mgr.wait()
        refs = mgr.checkpoints()
    assert [(r.step, r.tier) for r in refs] == [
        (4, "full"),
        (7, "weights"),
        (8, "full"),
        (9, "weights"),
        (10, "weights"),
    ]
    chunks = {i.key[len(CHUNK_PREFIX) :] for i in store.list(CHUNK_PREFIX)}
    assert referenced(store) <= chunks  # nothing a kept manifest needs was deleted
    assert chunks == referenced(store)  # and nothing else is left
    with CheckpointManager(store, start_worker=False) as mgr:
        for r in refs:
            assert_same(mgr.restore(r.step).state, saved[r.step])


def test_select_expired_protects_latest() -> None:
    from burst.checkpoint.manifest import CheckpointRef, manifest_key

    refs = [CheckpointRef(s, "full", manifest_key(s, "full")) for s in (1, 2, 3)]
    assert select_expired(refs, 1, None) == refs[:2]
    assert select_expired(refs, 1, None, protect=refs[0]) == refs[1:2]


def test_gc_during_a_save_in_flight_keeps_its_chunks(local_store: ObjectStore) -> None:
    """A GC in another thread (as another process would) runs while the worker uploads."""
    frozen = torch.randn(256, 1024)
    first = state_for(1, frozen)
    big = {"model": {"frozen": frozen, "head": torch.randn(2048, 1024)}, "step": 2}
    mgr = CheckpointManager(local_store, chunk_size=64 << 10, concurrency=1)
    mgr.save(1, first)
    mgr.wait()
    mgr.save(2, big)
    rounds = 0
    stop = threading.Event()

    def gc_loop() -> None:
        nonlocal rounds
        while not stop.is_set():
            collect_garbage(local_store, grace=0.0)  # no grace: only pending records protect
            rounds += 1

    t = threading.Thread(target=gc_loop)
    t.start()
    mgr.wait()
    stop.set()
    t.join()
    assert rounds >= 1
    assert_same(mgr.restore(2).state, big)
    assert_same(mgr.restore(1).state, first)
    mgr.close()


def test_apply_retention_outside_the_manager(local_store: ObjectStore) -> None:
    frozen = torch.randn(16, 1024)
    with CheckpointManager(local_store, chunk_size=64 << 10) as mgr:
        for step in (1, 2, 3):
            mgr.save(step, state_for(step, frozen))
            mgr.wait()
    res = apply_retention(local_store, keep_full=1, keep_weights=None, grace=0.0)
    assert res.deleted_manifests == [
        "manifests/000000000001.full.json",
        "manifests/000000000002.full.json",
    ]
    assert res.deleted_chunks  # the heads of steps 1 and 2
    assert [r.step for r in list_checkpoints(local_store)] == [3]
    chunks = {i.key[len(CHUNK_PREFIX) :] for i in local_store.list(CHUNK_PREFIX)}
    assert chunks == referenced(local_store)


def test_retention_failure_does_not_fail_a_committed_save(local_store: ObjectStore) -> None:
    frozen = torch.randn(16, 1024)
    with CheckpointManager(local_store, chunk_size=64 << 10, keep_full=2) as mgr:
        mgr.save(1, state_for(1, frozen))
        mgr.wait()
        ref = mgr.latest()
        assert ref is not None
        local_store.put_bytes(ref.key, b"not a manifest")  # GC cannot read it: stops, keeps all
        mgr.save(2, state_for(2, frozen))
        result = mgr.wait()  # committed: no error raised
        assert result is not None and "error" in result.extra["retention"]
        assert [r.step for r in mgr.checkpoints()] == [1, 2]
        assert mgr.restore().step == 2


def test_retention_never_deletes_the_newest_verified_checkpoint(local_store: ObjectStore) -> None:
    from burst.checkpoint.manifest import Manifest
    from burst.checkpoint.retention import newest_verified

    with CheckpointManager(local_store) as mgr:
        mgr.save(1, {"w": torch.zeros(8)}, tier="full")
        mgr.wait()
    # a newer checkpoint committed by something that did not verify its chunks (an old writer)
    (ref1,) = list_checkpoints(local_store)
    m = load_manifest(local_store, ref1)
    assert m.stats["verified"] is True
    m2 = Manifest(2, "full", m.created_at, m.chunk_size, m.total_bytes, m.arrays, m.chunks, m.tree)
    local_store.put_bytes(m2.key, m2.to_bytes())
    latest = {"step": 2, "tier": "full", "manifest": m2.key}
    local_store.put_bytes("latest.json", json.dumps(latest).encode())
    refs = list_checkpoints(local_store)
    assert newest_verified(local_store, refs) == ref1
    res = apply_retention(local_store, keep_full=1, keep_weights=None, grace=0.0)
    assert res.deleted_manifests == []  # step 1 is the newest verified one: kept
    assert [r.step for r in list_checkpoints(local_store)] == [1, 2]
