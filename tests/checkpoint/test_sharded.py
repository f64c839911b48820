"""Sharded checkpoints: each rank's own worker writes its shard, one global manifest commits.

Ranks are emulated in one test process by one CheckpointManager (with its own real worker
process and host buffer) per rank; the torchrun end-to-end runs are in tests/train.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from burst.checkpoint import CheckpointError, CheckpointManager, list_checkpoints
from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.sharded import (
    SHARD_PREFIX,
    ShardInfo,
    assemble,
    assignment,
    partition,
)
from burst.storage import ObjectStore

FAULT_ENV = "BURST_CHECKPOINT_FAULT"  # the checkpoint fault point (burst.faults.checkpoint)

CHUNK = 64 << 10


def full_state(step: int, frozen_seed: int = 7) -> dict:
    g = torch.Generator().manual_seed(step)
    frozen = torch.Generator().manual_seed(frozen_seed)
    return {
        "model": {
            f"layer{i}": torch.randn(1 << 14, generator=g if i < 2 else frozen) for i in range(12)
        },
        "optimizer": {"state": {0: {"step": torch.tensor(float(step))}}, "lr": 0.1},
        "step": step,
    }


def managers(store: ObjectStore, world: int, session: str, **kw: object) -> list[CheckpointManager]:
    return [
        CheckpointManager(
            store,
            chunk_size=CHUNK,
            shard=ShardInfo(r, world, session, commit_timeout_s=20.0),
            **kw,  # type: ignore[arg-type]
        )
        for r in range(world)
    ]


def save_all(mgrs: list[CheckpointManager], step: int, state: dict) -> None:
    world = len(mgrs)
    for r, m in enumerate(mgrs):
        m.save(step, partition(state, r, world))
    for m in mgrs:
        m.wait(30)


def assert_equal_state(a: object, b: object) -> None:
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b)
        for k in a:
            assert_equal_state(a[k], b[k])
    else:
        assert a == b


def test_assignment_balances_and_is_deterministic() -> None:
    sizes = [random.Random(3).randrange(1, 1000) for _ in range(50)]
    owner = assignment(sizes, 4)
    assert owner == assignment(sizes, 4)
    loads = [sum(s for s, o in zip(sizes, owner, strict=True) if o == r) for r in range(4)]
    assert max(loads) - min(loads) <= max(sizes)


@pytest.mark.parametrize("world", [2, 4])
def test_replicated_state_written_once_and_restored_on_any_world(
    local_store: ObjectStore, world: int
) -> None:
    mgrs = managers(local_store, world, "s1")
    try:
        state = full_state(10)
        save_all(mgrs, 10, state)
        refs = list_checkpoints(local_store)
        assert [(r.step, r.tier) for r in refs] == [(10, "full")]
        manifest = load_manifest(local_store, refs[0])
        per_rank = manifest.stats["ranks"]
        assert len(per_rank) == world
        # written once in all: the ranks' bytes add up to the state, each rank a part of it
        model_bytes = sum(t.numel() * 4 for t in state["model"].values())
        assert model_bytes <= sum(p["bytes"] for p in per_rank) < model_bytes + 64 * 1024
        assert all(p["bytes"] < model_bytes for p in per_rank)
        # nothing of phase 1 is left: no shard manifests, no pending records
        assert not list(local_store.list(SHARD_PREFIX))
        assert not list(local_store.list("pending/"))
        restored = mgrs[0].restore()
        assert_equal_state(assemble(restored.state), state)
        # incremental per shard: 2 of 12 layers change, the others are not uploaded again
        before = sum(p["uploaded_bytes"] for p in per_rank)
        state2 = full_state(11)
        save_all(mgrs, 11, state2)
        m2 = load_manifest(local_store, list_checkpoints(local_store)[-1])
        assert m2.stats["uploaded_bytes"] < before * 0.3
        assert_equal_state(assemble(mgrs[-1].restore().state), state2)
    finally:
        for m in mgrs:
            m.close()


@pytest.mark.parametrize(
    "point,rank",
    [
        ("chunk-uploaded", 1),
        ("shard-written", 1),
        ("shard-written", 0),
        ("before-global", 0),
        ("after-global", 0),
    ],
)
def test_worker_killed_during_a_sharded_save(
    local_store: ObjectStore, point: str, rank: int
) -> None:
    """A real SIGKILL of one rank's worker at a named point: the global checkpoint is either
    the new one complete, or absent (the previous complete one is what restore returns)."""
    mgrs = managers(local_store, 2, "s1")
    try:
        first = full_state(1)
        save_all(mgrs, 1, first)
    finally:
        for m in mgrs:
            m.close()
    # the worker starts at the first save, with the fault in its environment
    mgrs = managers(local_store, 2, "s2", start_worker=False)
    mgrs[rank].worker_env = {FAULT_ENV: point}
    # the two-phase commit completes when every shard became durable before the kill; then no
    # worker waits for a dead one, and the timeout must not be what decides (a loaded machine)
    commits = point == "after-global" or (point == "shard-written" and rank != 0)
    timeout_s = 20.0 if commits else 1.0
    for m in mgrs:
        m.shard = ShardInfo(m.shard.rank, 2, "s2", commit_timeout_s=timeout_s)  # type: ignore[union-attr]
    second = full_state(2)
    errors = []
    try:
        for r, m in enumerate(mgrs):
            m.save(2, partition(second, r, 2))
        for m in mgrs:
            try:
                # no restart-and-resend (the train loop's retry): this test is about what one
                # killed worker leaves visible, not about recovering from it
                m.wait(30, retry=False)
            except CheckpointError as exc:
                errors.append(exc.one_line())
    finally:
        for m in mgrs:
            m.close()
    # a save whose global manifest is in the store is committed, whichever worker died after
    # (issue 16); a save that cannot commit fails loudly on some rank
    assert bool(errors) != commits, errors
    reader = CheckpointManager(local_store, chunk_size=CHUNK, start_worker=False)
    steps = [r.step for r in list_checkpoints(local_store)]
    restored = reader.restore()
    # after the global commit, or a rank other than 0 killed once its shard was durable:
    # the two-phase commit completes (rank 0 commits); anything earlier commits nothing
    if commits:
        assert steps == [1, 2]
        assert_equal_state(assemble(restored.state), second)
    else:
        assert steps == [1]
        assert_equal_state(assemble(restored.state), first)
    reader.close()


def test_shards_with_padded_arrays_do_not_overlap_in_the_global_layout(
    local_store: ObjectStore,
) -> None:
    """Arrays whose sizes are not multiples of the alignment leave padding a shard's
    total_bytes does not count: the global layout must still give every byte one array (an
    overlap made a restore write one shard's last bytes over the next shard's first)."""
    odd = {
        "model": {f"layer{i}": torch.randn(3 * (1 << 13) + i) for i in range(6)},
        "step": torch.tensor(3.0),
    }
    mgrs = managers(local_store, 2, "s-odd")
    try:
        save_all(mgrs, 3, odd)
    finally:
        for m in mgrs:
            m.close()
    manifest = load_manifest(local_store, list_checkpoints(local_store)[-1])
    spans = sorted((a.offset, a.offset + a.nbytes) for a in manifest.arrays if a.nbytes)
    assert all(end <= nxt for (_, end), (nxt, _) in itertools.pairwise(spans))
    for _ in range(3):  # the chunks are fetched in parallel: any overlap shows as a race
        with CheckpointManager(local_store, start_worker=False) as reader:
            assert_equal_state(assemble(reader.restore().state), odd)


def test_a_manifest_whose_arrays_overlap_is_refused() -> None:
    from burst.checkpoint.layout import ArrayEntry, SpanIndex

    entries = [
        ArrayEntry("torch", "float32", (25,), 0, 100),
        ArrayEntry("torch", "uint8", (64,), 64, 64),
    ]
    with pytest.raises(CheckpointError, match="overlap"):
        SpanIndex(entries)
