"""A restore split across ranks: each rank reads and verifies only its part, then the parts
are broadcast. The ranks are threads of this test process whose collectives go through a
threading barrier (a stand-in for the process group: the torchrun runs in tests/train and
benchmarks/sharded.py use the real gloo one); the checkpoints are real (a real worker
process, a real store on disk)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
import torch

from burst.checkpoint import CheckpointError, CheckpointManager, list_checkpoints
from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import chunk_key
from burst.checkpoint.sharded import ShardInfo, assemble, partition
from burst.checkpoint.split_restore import Exchange, cut, restore_split
from burst.checkpoint.verify import ChunkAudit
from burst.storage import ObjectStore

CHUNK = 64 << 10


class ThreadGroup:
    """Collectives among ``world`` threads (broadcast, all-reduce MIN of a flag, rank 0's
    object): every call is a rendezvous of all ranks, like a process group's."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.barrier = threading.Barrier(world, timeout=60)
        self.slot: list[Any] = [None] * world

    def _rendezvous(self, rank: int, value: Any) -> list[Any]:
        self.slot[rank] = value
        self.barrier.wait()
        seen = list(self.slot)
        self.barrier.wait()
        return seen

    def exchange(self, rank: int) -> Exchange:
        def broadcast(t: torch.Tensor, src: int) -> None:
            seen = self._rendezvous(rank, t.clone() if rank == src else None)
            if rank != src:
                t.copy_(seen[src])

        def all_ok(flag: bool) -> bool:
            return all(self._rendezvous(rank, flag))

        def decide(choose: Callable[[], Any]) -> Any:
            return self._rendezvous(rank, choose() if rank == 0 else None)[0]

        return Exchange(rank, self.world, broadcast, all_ok, decide)


def run_ranks(
    store: ObjectStore,
    world: int,
    share: bool = False,
    into: Callable[[int], Any] | None = None,
) -> tuple[list[Any], list[ChunkAudit]]:
    group = ThreadGroup(world)
    results: list[Any] = [None] * world
    audits = [ChunkAudit() for _ in range(world)]

    def rank_main(rank: int) -> None:
        refs = list_checkpoints(store, "full") if rank == 0 else []
        try:
            results[rank] = restore_split(
                store,
                refs,
                group.exchange(rank),
                share=share,
                into=None if into is None else into(rank),
                audit=audits[rank],
            )
        except CheckpointError as exc:
            results[rank] = exc

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return results, audits


def state(step: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(step)
    return {
        "model": {f"layer{i}": torch.randn(3 * (1 << 13) + i, generator=g) for i in range(6)},
        "small": torch.arange(5, dtype=torch.int64),
        "step": step,
    }


def test_cut_is_contiguous_and_balanced() -> None:
    from burst.checkpoint.manifest import ChunkRef

    chunks = [ChunkRef(i * 100, 100 if i % 3 else 40, f"{i:064x}") for i in range(20)]
    runs = cut(chunks, 3)
    assert [c for run in runs for c in run] == sorted(chunks, key=lambda c: c.offset)
    loads = [sum(c.size for c in run) for run in runs]
    assert max(loads) - min(loads) <= 2 * 100
    assert cut([], 4) == [[], [], [], []]


@pytest.mark.parametrize(("world", "share"), [(2, False), (3, False), (3, True)])
def test_each_rank_verifies_its_part_and_every_rank_gets_the_whole(
    local_store: ObjectStore, world: int, share: bool
) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.save(4, state(4))
        mgr.wait(30)
    results, audits = run_ranks(local_store, world, share)
    want = state(4)
    for r in results:
        assert not isinstance(r, BaseException), r
        assert r.step == 4
        for k, t in want["model"].items():
            assert torch.equal(r.state["model"][k], t)
        assert torch.equal(r.state["small"], want["small"]) and r.state["step"] == 4
    # each chunk verified by exactly one rank; every rank verified some
    manifest = load_manifest(local_store, list_checkpoints(local_store)[-1])
    digests = [a.sound for a in audits]
    assert set().union(*digests) == {c.digest for c in manifest.chunks}
    assert sum(len(d) for d in digests) == len({c.digest for c in manifest.chunks})
    assert all(digests)


@pytest.mark.parametrize("share", [False, True])
def test_a_corrupt_part_makes_every_rank_fall_back_together(
    local_store: ObjectStore, share: bool
) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.save(4, state(4))
        mgr.wait(30)
        mgr.save(8, state(8))
        mgr.wait(30)
    newest = load_manifest(local_store, list_checkpoints(local_store)[-1])
    older = {c.digest for c in load_manifest(local_store, list_checkpoints(local_store)[0]).chunks}
    # a chunk of the last rank's part only (rank 0 would not see it itself)
    bad = next(c for c in reversed(cut(newest.chunks, 2)[1]) if c.digest not in older)
    local_store.put_bytes(chunk_key(bad.digest), b"\0" * bad.size)
    results, _ = run_ranks(local_store, 2, share)
    for r in results:
        assert not isinstance(r, BaseException), r
        assert r.step == 4
        assert torch.equal(r.state["model"]["layer0"], state(4)["model"]["layer0"])


def test_nothing_restores_is_one_error_on_every_rank(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.save(4, state(4))
        mgr.wait(30)
    m = load_manifest(local_store, list_checkpoints(local_store)[-1])
    local_store.delete([chunk_key(m.chunks[0].digest)])
    results, _ = run_ranks(local_store, 2)
    for r in results:
        assert isinstance(r, CheckpointError)
        assert "no usable checkpoint among 1" in r.one_line()


def test_no_checkpoint_is_none(local_store: ObjectStore) -> None:
    results, _ = run_ranks(local_store, 2)
    assert results == [None, None]


def fresh_targets(world: int) -> list[dict[str, Any]]:
    """Each rank's own model state to restore into (other values than any checkpoint's)."""
    return [state(1000 + r) for r in range(world)]


@pytest.mark.parametrize(("world", "share"), [(2, False), (3, True)])
def test_restore_into_the_callers_tensors_in_place(
    local_store: ObjectStore, world: int, share: bool
) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.save(4, state(4))
        mgr.wait(30)
    targets = fresh_targets(world)
    ptrs = [{k: t.data_ptr() for k, t in tg["model"].items()} for tg in targets]
    results, audits = run_ranks(local_store, world, share, into=lambda r: targets[r])
    want = state(4)
    for rank, r in enumerate(results):
        assert not isinstance(r, BaseException), r
        for k, t in want["model"].items():
            got = r.state["model"][k]
            assert got.data_ptr() == ptrs[rank][k]  # the caller's own tensor, written in place
            assert torch.equal(targets[rank]["model"][k], t)
        assert torch.equal(r.state["small"], want["small"])
    assert sum(len(a.sound) for a in audits) == len(
        {c.digest for c in load_manifest(local_store, list_checkpoints(local_store)[-1]).chunks}
    )


def test_in_place_restore_of_a_sharded_checkpoint_falls_back_over_a_corrupt_chunk(
    local_store: ObjectStore,
) -> None:
    """Saved by 2 ranks (replicated state, each writes a part), restored by 3 into their own
    tensors: the paths of the whole state are found through the shards; a corrupt chunk of
    the newest checkpoint overwrites the targets, and the fall-back rewrites every one."""
    saved = {4: state(4), 8: state(8)}
    mgrs = [
        CheckpointManager(
            local_store, chunk_size=CHUNK, shard=ShardInfo(r, 2, "s1", commit_timeout_s=20.0)
        )
        for r in range(2)
    ]
    try:
        for step, whole in saved.items():
            for r, m in enumerate(mgrs):
                m.save(step, partition(whole, r, 2))
            for m in mgrs:
                m.wait(30)
    finally:
        for m in mgrs:
            m.close()
    refs = list_checkpoints(local_store)
    newest = load_manifest(local_store, refs[-1])
    older = {c.digest for c in load_manifest(local_store, refs[0]).chunks}
    bad = next(c for c in cut(newest.chunks, 3)[2] if c.digest not in older)
    local_store.put_bytes(chunk_key(bad.digest), b"\0" * bad.size)
    targets = fresh_targets(3)
    ptrs = [{k: t.data_ptr() for k, t in tg["model"].items()} for tg in targets]
    results, _ = run_ranks(local_store, 3, into=lambda r: targets[r])
    for rank, r in enumerate(results):
        assert not isinstance(r, BaseException), r
        assert r.step == 4
        whole = assemble(r.state)
        for k, t in saved[4]["model"].items():
            assert whole["model"][k].data_ptr() == ptrs[rank][k]
            assert torch.equal(targets[rank]["model"][k], t)
        assert whole["step"] == 4
