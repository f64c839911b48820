"""Replication to a second store (local -> S3 on loopback), verified on arrival."""

from __future__ import annotations

import pytest
import torch
from ckpt_helpers import assert_same

from burst.checkpoint import CheckpointManager, list_checkpoints, replicate
from burst.checkpoint.manifest import chunk_key
from burst.errors import CheckpointError
from burst.storage import ObjectStore, open_store


@pytest.mark.e2e
def test_replicate_then_restore_from_the_replica(local_store: ObjectStore, s3_bucket: str) -> None:
    frozen = torch.randn(128, 1024)
    saved = {}
    with CheckpointManager(local_store, chunk_size=64 << 10) as mgr:
        for step in (1, 2):
            saved[step] = {"frozen": frozen, "head": torch.randn(16, 1024), "step": step}
            mgr.save(step, saved[step])
            mgr.wait()
        replica = open_store(f"s3://{s3_bucket}/replica")
        first = mgr.replicate_to(replica, steps=[1])
        second = mgr.replicate_to(replica)
    assert [r.step for r in first.checkpoints] == [1]
    assert first.copied_chunks > 0
    # the frozen chunks were already there: the second copy sent only what changed
    assert 0 < second.copied_bytes < first.copied_bytes
    assert [r.step for r in list_checkpoints(replica)] == [1, 2]
    with CheckpointManager(replica, start_worker=False) as remote:
        for step in (1, 2):
            assert_same(remote.restore(step).state, saved[step])
        assert remote.restore().step == 2


def test_corrupt_source_chunk_is_not_replicated(local_store: ObjectStore, tmp_path) -> None:
    with CheckpointManager(local_store, chunk_size=64 << 10) as mgr:
        mgr.save(1, {"w": torch.randn(64, 1024)})
        mgr.wait()
        manifest = mgr.restore().manifest
    key = chunk_key(manifest.chunks[0].digest)
    local_store.put_bytes(key, b"garbage")
    dst = open_store(str(tmp_path / "dst"))
    try:
        replicate(local_store, dst)
    except CheckpointError as exc:
        assert "corrupt" in exc.one_line() and manifest.chunks[0].digest[:16] in exc.one_line()
    else:
        raise AssertionError("a corrupt chunk was replicated")
    assert list_checkpoints(dst) == []  # no manifest without its chunks
