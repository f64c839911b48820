"""Memory tiers in the train step (training.checkpoint.memory_tiers; docs/checkpoints.md
"Tiers"): 2 nodes x 2 ranks, real torchrun ranks (CPU, gloo), real peer memory servers (one
process per node, loopback TCP).

A node is lost (its two ranks SIGKILLed, its peer server killed with its memory) after a
checkpoint that only the memory tiers hold; the step is started again with a new, empty
server for that node, and the ranks restore that checkpoint from the surviving node's server
(the lost ranks' parts from their peer copy there, source ``peer``), never from the store,
which does not hold it, and end with the weights of the run that was not interrupted."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest
from ranks_helpers import REPO, STEP, doc, rank_pids, ranks_spec, step_env, train

from burst.checkpoint.manifest import manifest_key
from burst.checkpoint.peer import PeerStore, start_peer

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.minutes]  # (87 s: make test-long)

STEPS = 14
CAPACITY = 64 << 20
PART = re.compile(r"/world-4/rank-(\d)/manifests/(\d+)\.full\.json$")


def tier_spec(tmp: Path, name: str) -> Path:
    """2 nodes x 2 ranks, a full checkpoint every 2 steps, the store at the first save and
    the last one only (store_every 1000): the others are held in memory alone."""
    path = ranks_spec(tmp, name, processes=2, nodes=2, steps=STEPS)
    text = path.read_text()
    old = "    interval_steps: 5\n    full_every: 2\n"
    assert old in text
    path.write_text(
        text.replace(
            old,
            "    interval_steps: 2\n    full_every: 1\n"
            "    memory_tiers: {enabled: true, capacity: 64M, store_every: 1000}\n",
        )
    )
    return path


def whole_in(address: str) -> set[int]:
    """The steps whose four parts (ranks 0-3) the server at ``address`` holds committed."""
    parts: dict[int, set[int]] = {}
    peer = PeerStore(address)
    try:
        for info in peer.list(""):
            m = PART.search(info.key)
            if m:
                parts.setdefault(int(m.group(2)), set()).add(int(m.group(1)))
    finally:
        peer.close()
    return {step for step, ranks in parts.items() if ranks == {0, 1, 2, 3}}


def in_store(store: Path) -> set[int]:
    return {int(p.name.split(".")[0]) for p in (store / "manifests").glob("*.full.json")}


def test_a_lost_node_restores_from_the_surviving_peer_bit_identical(tmp_path: Path) -> None:
    spec = tier_spec(tmp_path, "tiers")
    runs = tmp_path / "runs"
    # the run that is not interrupted: the step starts a peer server per node itself
    plain = train(spec, "plain", runs)
    assert plain.returncode == 0, plain.stderr[-3000:]
    assert "peer memory server per node" in plain.stderr
    reference = doc(runs, "plain")["final_weights_sha256"]

    store = tmp_path / "store" / "lost"
    servers = [start_peer(CAPACITY), start_peer(CAPACITY)]
    try:
        addresses = [a for _, a in servers]
        marker = str(os.getpid())
        proc = subprocess.Popen(
            [*STEP, "--spec", str(spec), "--run-id", "lost", "--runs-root", str(runs)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=step_env(
                BURST_TEST_PARENT=marker,
                BURST_PEER_ADDRESSES=",".join(addresses),
                BURST_STEP_PACE_S="0.3",
            ),
        )
        try:
            deadline = time.monotonic() + 180
            # a checkpoint the memory tiers hold whole and the store does not
            while time.monotonic() < deadline and proc.poll() is None:
                durable = in_store(store)  # (step 2, once it committed)
                if durable and max(whole_in(addresses[0])) > max(durable):
                    break
                time.sleep(0.05)
            assert proc.poll() is None, "the step ended before a memory-only checkpoint"
            pids = rank_pids(int(marker))
            assert sorted(pids) == [0, 1, 2, 3]
            # node 1 is lost: its ranks and its server, with its memory
            for rank in (2, 3):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pids[rank], signal.SIGKILL)
            servers[1][0].kill()
            _, err = proc.communicate(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        assert proc.returncode == 75, err[-3000:]
        newest = max(whole_in(addresses[0]))
        assert newest not in in_store(store), "the newest checkpoint reached the store"
        assert not (store / manifest_key(newest, "full")).exists()

        # node 1 replaced: a new server with empty memory
        servers[1] = start_peer(CAPACITY)
        addresses[1] = servers[1][1]
        resumed = train(spec, "lost", runs, BURST_PEER_ADDRESSES=",".join(addresses))
        assert resumed.returncode == 0, resumed.stderr[-3000:]
        assert "Traceback" not in resumed.stderr
        d = doc(runs, "lost")
        last = d["attempts"][-1]
        assert last["resumed_from"] == newest
        assert last["restored_from_tier"] == "peer"
        assert d["final_weights_sha256"] == reference
        # the last step's save is durable whatever store_every says
        assert STEPS in in_store(store)
    finally:
        for server, _ in servers:
            server.kill()
            server.wait()
