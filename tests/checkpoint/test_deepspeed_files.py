"""DeepSpeed checkpoints of several ranks, the file layer (no DeepSpeed run here: its ranks are
emulated by one sharded CheckpointManager per rank, each with its own real worker process,
on a real store): every rank uploads its own files, one global manifest commits them, and a
restoring rank fetches (verified) only the files DeepSpeed opens on it. The real DeepSpeed
ranks are in tests/checkpoint/test_deepspeed_ranks.py."""

from __future__ import annotations

import random

import numpy as np
import pytest

from burst.checkpoint import CheckpointError, CheckpointManager, list_checkpoints
from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.deepspeed import fetch_files, file_owner, needed, saved_layout
from burst.checkpoint.manifest import chunk_key
from burst.checkpoint.sharded import ShardInfo
from burst.storage import ObjectStore

CHUNK = 4096
SEED = random.SystemRandom().randrange(10**6)


def rank_files(rank: int, stage: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The files DeepSpeed writes on ``rank`` (names as it names them), random bytes."""
    names = [f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt"]
    if stage == 3:
        names.append(f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt")
    elif rank == 0:
        names.append("mp_rank_00_model_states.pt")
    return {n: rng.integers(0, 256, int(rng.integers(1, 5 * CHUNK)), dtype=np.uint8) for n in names}


def save_ranks(store: ObjectStore, world: int, stage: int, step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(SEED)
    mgrs = [
        CheckpointManager(
            store, chunk_size=CHUNK, shard=ShardInfo(r, world, "s", commit_timeout_s=20.0)
        )
        for r in range(world)
    ]
    every: dict[str, np.ndarray] = {}
    try:
        for r, m in enumerate(mgrs):
            files = rank_files(r, stage, rng)
            every.update(files)
            tag = f"step{step:012d}"
            m.save(step, {"deepspeed": {"tag": tag, "rank": r, "world": world, "files": files}})
        for m in mgrs:
            m.wait(30)
    finally:
        for m in mgrs:
            m.close()
    return every


def test_file_owner() -> None:
    assert file_owner("zero_pp_rank_3_mp_rank_00_optim_states.pt") == 3
    assert file_owner("bf16_zero_pp_rank_12_mp_rank_00_optim_states.pt") == 12
    assert file_owner("zero_pp_rank_0_mp_rank_00_model_states.pt") == 0
    assert file_owner("mp_rank_00_model_states.pt") is None


@pytest.mark.parametrize(("stage", "world"), [(2, 2), (3, 4)])
def test_each_rank_fetches_only_its_files(local_store: ObjectStore, stage: int, world: int) -> None:
    every = save_ranks(local_store, world, stage, 5)
    (ref,) = list_checkpoints(local_store)
    manifest = load_manifest(local_store, ref)
    layout = saved_layout(manifest)
    assert layout.world == world and layout.tag == "step000000000005", f"seed {SEED}"
    assert sorted(f.name for f in layout.files) == sorted(every)
    for rank in range(world):
        files = needed(layout, rank, world)
        want = {n for n in every if file_owner(n) in (None, rank)}
        assert {f.name for f in files} == want
        got = fetch_files(local_store, manifest, files)
        assert set(got) == want
        for name, data in got.items():
            assert np.array_equal(data, every[name]), f"seed {SEED}: {name}"
    # another world size: every file (the universal conversion needs them all)
    assert len(needed(layout, 0, world + 1)) == len(every)


def test_a_corrupt_chunk_of_a_needed_file_is_an_error_not_bytes(local_store: ObjectStore) -> None:
    save_ranks(local_store, 2, 3, 5)
    manifest = load_manifest(local_store, list_checkpoints(local_store)[0])
    layout = saved_layout(manifest)
    mine = needed(layout, 1, 2)
    entry = manifest.arrays[mine[0].index]
    chunk = next(c for c in manifest.chunks if c.offset <= entry.offset < c.offset + c.size)
    local_store.put_bytes(chunk_key(chunk.digest), b"x" * chunk.size)
    with pytest.raises(CheckpointError, match="corrupt"):
        fetch_files(local_store, manifest, mine)


def test_a_checkpoint_that_is_not_deepspeed_says_so(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as m:
        m.save(1, {"model": np.zeros(4)})
        m.wait(30)
    manifest = load_manifest(local_store, list_checkpoints(local_store)[0])
    with pytest.raises(CheckpointError, match="not a DeepSpeed checkpoint"):
        saved_layout(manifest)
