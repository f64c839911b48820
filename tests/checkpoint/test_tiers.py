"""Checkpoint tiers: this node's memory, a peer's memory, then the object store.

Peer servers (``burst.checkpoint.peer``) are real TCP servers: processes of their own where a
test loses a "node" (the process and its memory killed), a server thread in this process
where a test reaches into its memory (a corrupt chunk). Ranks are real processes
(``tiers_rank_job.py``); the single-rank cases use one manager with its real worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from ckpt_helpers import assert_same

from burst.checkpoint import CheckpointManager
from burst.checkpoint.catalog import latest_checkpoint, list_checkpoints, load_manifest
from burst.checkpoint.manifest import CHUNK_PREFIX
from burst.checkpoint.peer import PeerRefused, PeerServer, PeerStore, start_peer
from burst.checkpoint.sharded import ShardInfo
from burst.errors import BadInputError, CheckpointError
from burst.storage import LocalStore, open_store
from burst.storage.base import ObjectInfo, StoreError

HERE = Path(__file__).parent
CHUNK = 64 << 10
MiB = 1 << 20


def state(step: int) -> dict:
    g = torch.Generator().manual_seed(step)
    return {"w": torch.randn(96 << 10, generator=g), "b": torch.randn(7, generator=g), "n": step}


@pytest.fixture
def server() -> Iterator[PeerServer]:
    """A peer server in a thread of this process (the test can reach into its memory)."""
    srv = PeerServer(64 * MiB)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()  # a second time (a test shut it down): no-op


def kill(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait()


class SwitchedStore(LocalStore):
    """The object store, which the test can take down (every call: StoreError) and whose
    reads it counts."""

    down = False
    gets = 0

    def _check(self) -> None:
        if self.down:
            raise StoreError("connection refused (the store is down)", where=self.url)

    def get_bytes(self, key: str) -> bytes:
        self._check()
        SwitchedStore.gets += 1
        return super().get_bytes(key)

    def get_into(self, key: str, out: memoryview) -> None:
        self._check()
        SwitchedStore.gets += 1
        super().get_into(key, out)

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        self._check()
        return super().list(prefix)


def test_the_peer_keeps_only_sound_chunks_and_whole_checkpoints(
    server: PeerServer, tmp_path: Path
) -> None:
    peer = PeerStore(server.address, "run/rank-0")
    with pytest.raises(PeerRefused, match="arrived corrupt"):
        peer.put_bytes(f"{CHUNK_PREFIX}{'0' * 64}", b"not those bytes")
    # a manifest whose chunks are not all there is refused: manifest-last, per tier
    with CheckpointManager(str(tmp_path / "store"), chunk_size=CHUNK) as mgr:
        mgr.save(1, state(1))
        mgr.wait(30)
    store = LocalStore(tmp_path / "store")
    key = "manifests/000000000001.full.json"
    with pytest.raises(PeerRefused, match="chunks are not here"):
        peer.put_bytes(key, store.get_bytes(key))
    assert not peer.exists(key)
    for info in store.list(CHUNK_PREFIX):
        peer.put_bytes(info.key, store.get_bytes(info.key))
    peer.put_bytes(key, store.get_bytes(key))
    assert peer.exists(key)
    peer.close()


def test_a_full_peer_drops_its_oldest_checkpoints_never_the_newest(tmp_path: Path) -> None:
    srv = PeerServer(900 << 10)  # room for two checkpoints of ~400 KiB, not three
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with CheckpointManager(str(tmp_path / "store"), chunk_size=CHUNK, local=srv.address) as mgr:
            for step in (1, 2, 3):
                mgr.save(step, state(step))
                assert mgr.wait(30) is not None
            held = [i.key for i in PeerStore(srv.address, mgr.tier_prefix).list("manifests/")]
            assert sorted(held) == [
                "manifests/000000000002.full.json",
                "manifests/000000000003.full.json",
            ]
            assert srv.memory.used <= srv.memory.capacity
            # an object larger than the whole capacity is refused, the connection kept
            peer = PeerStore(srv.address, mgr.tier_prefix)
            with pytest.raises(PeerRefused, match="exceed the capacity"):
                peer.put_bytes("big", bytes(1 << 20))
            assert len(list(peer.list("manifests/"))) == 2
            peer.close()
            got = mgr.restore()
            assert (got.step, got.source) == (3, "local")
            assert_same(got.state, state(3))
    finally:
        srv.shutdown()
        srv.server_close()


def test_restore_falls_back_tier_by_tier(server: PeerServer, tmp_path: Path) -> None:
    """Newest from the fastest tier that holds it whole: local, peer, then the store; a
    corrupt or lost copy falls through to the next tier, a store that is down is not
    needed while a memory tier holds the checkpoint."""
    local_proc, local = start_peer(64 * MiB)
    try:
        store = SwitchedStore(tmp_path / "store")
        mgr = CheckpointManager(
            store, chunk_size=CHUNK, local=local, peers=[server.address], store_every=2
        )
        with mgr:
            for step in (1, 2):
                mgr.save(step, state(step))
                result = mgr.wait(30)
                assert result is not None
                assert result.extra["store"] is (step == 1)
            assert [r.step for r in list_checkpoints(store)] == [1]  # 2: memory tiers only
            assert [r.step for r in mgr.checkpoints()] == [1, 2]
            got = mgr.restore()
            assert (got.step, got.source) == (2, "local")
            assert_same(got.state, state(2))
            store.down = True  # the store down, the memory tiers sound: no store needed
            assert (mgr.restore().step, mgr.restore().source) == (2, "local")
            store.down = False
            kill(local_proc)  # this node's memory is gone
            got = mgr.restore()
            assert (got.step, got.source) == (2, "peer")
            assert_same(got.state, state(2))
            # a corrupt chunk of step 2 in the peer's memory: no tier holds step 2 whole,
            # so the newest consistent checkpoint is step 1, from the fastest tier with it
            in_peer = PeerStore(server.address, mgr.tier_prefix)
            newest = latest_checkpoint(in_peer)
            assert newest is not None and newest.step == 2
            digest = load_manifest(in_peer, newest).chunks[0].digest
            in_peer.close()
            held = server.memory._objects[f"{mgr.tier_prefix}/{CHUNK_PREFIX}{digest}"]
            held.data = bytes([held.data[0] ^ 1]) + held.data[1:]
            got = mgr.restore()
            assert (got.step, got.source) == (1, "peer")
            assert_same(got.state, state(1))
            server.shutdown()  # both memory tiers lost: the store
            server.server_close()
            SwitchedStore.gets = 0
            got = mgr.restore()
            assert (got.step, got.source) == (1, "store")
            assert_same(got.state, state(1))
            assert SwitchedStore.gets > 0
    finally:
        kill(local_proc)


def test_a_lost_node_restores_from_its_peer_not_the_store(tmp_path: Path) -> None:
    """4 ranks, each a process whose "node" also runs a peer server; rank r replicates to
    node r+1. Rank 2's node is lost (its process gone, its peer server killed): a new rank 2
    on a new node (an empty peer server) restores the newest checkpoint, which only the
    memory tiers hold, from node 3's memory, reads nothing from the store, and trains on
    bit-identically to the run that was not interrupted."""
    world = 4
    nodes = [start_peer(64 * MiB) for _ in range(world)]
    out = tmp_path / "out"
    out.mkdir()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])),
    }

    def rank(mode: str, r: int, local: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                str(HERE / "tiers_rank_job.py"),
                mode,
                str(r),
                str(tmp_path / f"store-{r}"),
                local,
                nodes[(r + 1) % world][1],
                str(out),
            ],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )

    try:
        procs = [rank("train", r, nodes[r][1]) for r in range(world)]
        for p in procs:
            assert p.wait(timeout=240) == 0
        kill(nodes[2][0])  # rank 2's node is lost, with its memory
        fresh_proc, fresh = start_peer(64 * MiB)  # the new node's memory: empty
        try:
            p = rank("resume", 2, fresh)
            stdout, _ = p.communicate(timeout=240)
            assert p.returncode == 0
        finally:
            kill(fresh_proc)
        report = json.loads(stdout.strip().splitlines()[-1])
        assert report == {"step": 4, "source": "peer", "store_gets": 0}
        assert_same(
            torch.load(out / "rank-2.restored.pt", weights_only=False),
            torch.load(out / "rank-2.saved.pt", weights_only=False),
        )
        assert_same(torch.load(out / "rank-2.resumed.pt"), torch.load(out / "rank-2.after.pt"))
    finally:
        for proc, _ in nodes:
            kill(proc)


def test_a_peer_killed_mid_replication_leaves_nothing_restorable(tmp_path: Path) -> None:
    """The peer dies after some chunks of step 2 arrived, before its manifest: the save
    still commits to the store, and no restore ever takes the peer's partial copy."""
    peer_proc, peer = start_peer(64 * MiB)
    pause = tmp_path / "pause"
    pause.mkdir()
    worker_env = {
        "BURST_CHECKPOINT_FAULT": "chunk-uploaded:2",  # the 2nd chunk in the peer's memory
        "BURST_CHECKPOINT_FAULT_ONCE": str(tmp_path / "fired"),
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{pause}",
    }
    try:
        with CheckpointManager(str(tmp_path / "store"), chunk_size=CHUNK, peers=[peer]) as first:
            first.save(1, state(1))
            first.wait(30)
            prefix = first.tier_prefix
        mgr = CheckpointManager(
            str(tmp_path / "store"), chunk_size=CHUNK, peers=[peer], worker_env=worker_env
        )
        with mgr:
            mgr.save(2, state(2))
            deadline = time.monotonic() + 60
            while not (pause / "paused").exists():
                assert time.monotonic() < deadline, "the worker never reached the fault point"
                time.sleep(0.05)
            held = PeerStore(peer, prefix)
            assert [i.key for i in held.list("manifests/")] == ["manifests/000000000001.full.json"]
            assert len(list(held.list(CHUNK_PREFIX))) > 0  # a partial copy of step 2...
            got = mgr.restore()  # ...that no restore takes
            assert (got.step, got.source) == (1, "peer")
            held.close()
            kill(peer_proc)  # the peer dies mid-replication
            (pause / "resume").touch()
            result = mgr.wait(60)
            assert result is not None and result.step == 2
            assert "error" in result.extra["tiers"]["peer"]
            got = mgr.restore()
            assert (got.step, got.source) == (2, "store")
            assert_same(got.state, state(2))
    finally:
        kill(peer_proc)


def test_a_notice_save_counts_once_a_peer_holds_it(server: PeerServer, tmp_path: Path) -> None:
    """At a notice, the save goes to the memory tier first and the store if the window
    allows: a window that closes before the store's commit leaves the memory copy as the
    save (restorable), not a failed save."""
    pause = tmp_path / "pause"
    pause.mkdir()
    worker_env = {
        "BURST_CHECKPOINT_FAULT": "before-manifest@5:2",  # the store's commit of step 5
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{pause}",
    }
    store = str(tmp_path / "store")
    with CheckpointManager(
        store, chunk_size=CHUNK, peers=[server.address], store_every=3, worker_env=worker_env
    ) as mgr:
        mgr.commit_by(time.time() + 600)  # a notice: this save goes to the store too
        mgr.save(5, state(5))
        deadline = time.monotonic() + 60
        while not (pause / "paused").exists():
            assert time.monotonic() < deadline, "the worker never reached the store's commit"
            time.sleep(0.05)
        mgr.commit_by(time.time() - 1)  # the window closes before the store commits
        time.sleep(0.2)  # the worker reads the deadline (a thread of its own)
        (pause / "resume").touch()
        result = mgr.wait(60)
        assert result is not None and result.step == 5
        assert result.extra["store"] is False and "deadline" in result.extra["store_error"]
        mgr.commit_by(None)
        assert list_checkpoints(open_store(store)) == []
        assert [r.step for r in mgr.checkpoints()] == [5]
        got = mgr.restore()
        assert (got.step, got.source) == (5, "peer")
        assert_same(got.state, state(5))


def test_a_bad_peer_setting_is_one_line_and_exit_2(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="'node-3' is not HOST:PORT"):
        CheckpointManager(str(tmp_path / "store"), peers=["node-3"], start_worker=False)
    with pytest.raises(CheckpointError, match="each rank of a sharded manager's world"):
        CheckpointManager(  # every rank's tiers, for a world of 2: two lists
            str(tmp_path / "store"),
            peers=["127.0.0.1:7001"],
            shard=ShardInfo(0, 2, "s"),
            rank_tiers=[[("peer", "127.0.0.1:7001")]],
            start_worker=False,
        )
    proc = subprocess.run(
        [sys.executable, "-m", "burst.checkpoint.peer", "--capacity", "lots"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "size 'lots' is not a number of bytes (e.g. 512M, 8G)"


def test_a_sharded_restore_reads_the_parts_tier_by_tier(server: PeerServer, tmp_path: Path) -> None:
    """A sharded manager (the train loop's with several ranks) commits its part to the
    memory tiers; ``restore_split`` (the one restore loop, read plan ``PartsRead``) reads
    the parts from local, then peer, then the store, falling back as a whole manager does.
    One rank here (the many-rank run: tests/train/test_memory_tiers.py)."""
    from burst.checkpoint.read_plan import process_group
    from burst.checkpoint.sharded import assemble, partition

    local_proc, local = start_peer(64 * MiB)
    try:
        store = SwitchedStore(tmp_path / "store")
        shard = ShardInfo(0, 1, "s")
        mgr = CheckpointManager(
            store,
            chunk_size=CHUNK,
            local=local,
            peers=[server.address],
            store_every=2,
            shard=shard,
        )
        ex = process_group()
        with mgr:
            for step in (1, 2):
                mgr.save(step, partition(state(step), 0, 1))
                result = mgr.wait(30)
                assert result is not None and result.extra["store"] is (step == 1)
            assert [r.step for r in list_checkpoints(store)] == [1]  # 2: memory tiers only
            assert mgr.tier_prefix.endswith("/world-1/rank-0")

            def restored() -> tuple[int, str, dict]:
                # into the live tensors, as the train loop restores: filled in place
                live = {"w": torch.zeros(96 << 10), "b": torch.zeros(7), "n": 0}
                got = mgr.restore_split(ex, "full", into=live)
                assert got is not None
                whole = assemble(got.state)
                assert whole["w"] is live["w"] and whole["b"] is live["b"]
                return got.step, got.source, whole

            step, source, whole = restored()
            assert (step, source) == (2, "local")
            assert_same(whole, state(2))
            kill(local_proc)  # this node's memory is gone
            step, source, whole = restored()
            assert (step, source) == (2, "peer")
            assert_same(whole, state(2))
            # a corrupt chunk of step 2 in the peer: the previous step, from the peer
            in_peer = PeerStore(server.address, mgr.tier_prefix)
            newest = latest_checkpoint(in_peer)
            assert newest is not None and newest.step == 2
            digest = load_manifest(in_peer, newest).chunks[0].digest
            in_peer.close()
            held = server.memory._objects[f"{mgr.tier_prefix}/{CHUNK_PREFIX}{digest}"]
            held.data = bytes([held.data[0] ^ 1]) + held.data[1:]
            step, source, whole = restored()
            assert (step, source) == (1, "peer")
            assert_same(whole, state(1))
            server.shutdown()  # both memory tiers lost: the store's global manifest
            server.server_close()
            SwitchedStore.gets = 0
            step, source, whole = restored()
            assert (step, source) == (1, "store")
            assert_same(whole, state(1))
            assert SwitchedStore.gets > 0
    finally:
        kill(local_proc)


def test_a_newer_checkpoint_in_the_store_wins_over_the_memory_read_ahead(
    server: PeerServer, tmp_path: Path
) -> None:
    """A restore reads the memory tiers' newest checkpoint while the store is still being
    listed; when the store lists a newer one (the peer missed a save), the store's is the
    result, and when that one is corrupt the memory tier's is read again: the arrays a
    restore fills in place (``into=``) hold the checkpoint returned, not the one read ahead
    or the corrupt one."""
    store = str(tmp_path / "store")
    with CheckpointManager(store, chunk_size=CHUNK, peers=[server.address]) as mgr:
        mgr.save(1, state(1))
        assert mgr.wait(30) is not None
    with CheckpointManager(store, chunk_size=CHUNK) as mgr:  # step 2 reaches the store only
        mgr.save(2, state(2))
        assert mgr.wait(30) is not None
    mgr = CheckpointManager(store, chunk_size=CHUNK, peers=[server.address], start_worker=False)
    live = {"w": torch.zeros(96 << 10), "b": torch.zeros(7), "n": 0}
    got = mgr.restore(into=live)
    assert (got.step, got.source) == (2, "store")
    assert got.state["w"] is live["w"]
    assert_same(got.state, state(2))
    newest = latest_checkpoint(open_store(store))
    assert newest is not None and newest.step == 2
    digest = load_manifest(open_store(store), newest).chunks[0].digest
    chunk = tmp_path / "store" / f"{CHUNK_PREFIX}{digest}"
    chunk.write_bytes(bytes([chunk.read_bytes()[0] ^ 1]) + chunk.read_bytes()[1:])
    live = {"w": torch.zeros(96 << 10), "b": torch.zeros(7), "n": 0}
    got = mgr.restore(into=live)
    assert (got.step, got.source) == (1, "peer")
    assert got.state["w"] is live["w"]
    assert_same(got.state, state(1))
    mgr.close()
