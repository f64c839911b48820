"""The store half of survivors commit (issue 44; the torchrun trials are in
tests/train/test_survivors_commit.py): a lost rank's part of a replicated state written by
another writer in its stead, a second committer of the same shards, and a commit that must
not mistake an earlier attempt's manifest of the same step for its own.

Ranks are emulated in this process by one CheckpointManager each (real worker processes).
"""

from __future__ import annotations

import pytest
import torch

from burst.checkpoint import CheckpointError, CheckpointManager, list_checkpoints
from burst.checkpoint.manifest import Manifest
from burst.checkpoint.sharded import (
    SHARD_PREFIX,
    ShardInfo,
    assemble,
    commit_global,
    commit_shards,
    committed_in_session,
    partition,
)
from burst.storage import ObjectStore, open_store

pytestmark = [pytest.mark.slow]

CHUNK = 64 << 10


def state(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"model": {f"w{i}": torch.randn(1 << 12, generator=g) for i in range(6)}, "step": step}


def writer(store: ObjectStore, rank: int, session: str, *, commit: bool) -> CheckpointManager:
    info = ShardInfo(rank, 2, session, commit_timeout_s=20.0, global_commit=commit)
    return CheckpointManager(store, chunk_size=CHUNK, shard=info)


def test_a_stand_in_part_and_a_second_committer_commit_one_whole_checkpoint(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}/s")
    whole = state(7)
    # rank 0 writes its shard; rank 1 is lost: a survivor writes rank 1's part from its
    # replica, then commits the global manifest itself (rank 0 may be lost too)
    mgrs = [writer(store, 0, "s1", commit=False), writer(store, 1, "s1", commit=False)]
    try:
        for r, m in enumerate(mgrs):
            m.save(7, partition(whole, r, 2))
            m.wait(30)
    finally:
        for m in mgrs:
            m.close()
    commit_shards(store, 7, "full", ShardInfo(0, 2, "s1", commit_timeout_s=5.0))
    done = committed_in_session(store, 7, "full", "s1")
    assert done is not None and done.step == 7
    # rank 0's own writer, alive, commits the same step afterwards: its shards are gone
    # (committed): it sees them committed in its session and stops waiting, no error
    late = writer(store, 0, "s1", commit=True)
    try:
        late.save(7, partition(whole, 0, 2))
        late.wait(30)  # without the check: 20 s of waiting, then "did not arrive"
    finally:
        late.close()
    assert [(r.step, r.tier) for r in list_checkpoints(store)] == [(7, "full")]
    reader = CheckpointManager(store, start_worker=False)
    try:
        got = assemble(reader.restore(7, tier="full").state)
    finally:
        reader.close()
    assert got["step"] == 7
    for k, v in whole["model"].items():
        assert torch.equal(got["model"][k], v), k
    assert not list(store.list(SHARD_PREFIX))  # the late shard and its record are dropped
    assert not list(store.list("pending/"))


def test_an_earlier_attempts_manifest_of_the_step_is_not_this_commit(tmp_path) -> None:
    store = open_store(f"file://{tmp_path}/s")
    whole = state(5)
    mgrs = [writer(store, 0, "old", commit=True), writer(store, 1, "old", commit=True)]
    try:
        for r, m in enumerate(mgrs):
            m.save(5, partition(whole, r, 2))
        for m in mgrs:
            m.wait(30)
    finally:
        for m in mgrs:
            m.close()
    assert committed_in_session(store, 5, "full", "old") is not None
    assert committed_in_session(store, 5, "full", "new") is None
    # a new attempt's rank 0 at the same step, its peer lost: its wait ends with the
    # missing shard named, never with the old attempt's manifest taken as its commit
    m = writer(store, 0, "new", commit=False)
    try:
        m.save(5, partition(whole, 0, 2))
        m.wait(30)
    finally:
        m.close()
    with pytest.raises(CheckpointError, match="rank\\(s\\) 1 of 2"):
        commit_global(
            store,
            load_manifest_of(store, 5),
            ShardInfo(0, 2, "new", commit_timeout_s=2.0),
        )


def load_manifest_of(store: ObjectStore, step: int) -> Manifest:
    from burst.checkpoint.catalog import load_manifest

    return load_manifest(store, list_checkpoints(store)[-1])
