"""Warming a CheckpointManager before its first save: the host buffer and the worker process
exist beforehand, and the first save uses them (no new buffer, no new worker). Real worker
processes, a real store on disk; no wall-clock assertion (the stall figures are measured by
benchmarks/checkpoint.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from burst.checkpoint import CheckpointError, CheckpointManager
from burst.storage import ObjectStore

CHUNK = 64 << 10


def state(seed: int) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    return {"w": torch.randn(300_000, generator=g), "b": torch.randn(7, generator=g), "n": seed}


@pytest.mark.parametrize("exact", [True, False])
def test_first_save_uses_the_warmed_buffer_and_worker(
    local_store: ObjectStore, exact: bool
) -> None:
    first = state(1)
    nbytes = sum(t.numel() * 4 for t in (first["w"], first["b"]))
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        assert mgr.worker_pid is None
        if exact:
            mgr.warm(first, wait=True)
            assert mgr.worker_pid is not None
        else:
            mgr.warm(nbytes=nbytes)  # in the background: the save waits for it
        mgr.save(1, first)
        pid, buffer = mgr.worker_pid, mgr._buffer
        assert pid is not None and buffer is not None and buffer.size >= nbytes
        mgr.wait(30)
        mgr.save(2, state(2))
        mgr.wait(30)
        assert (mgr.worker_pid, mgr._buffer) == (pid, buffer)  # neither replaced
        for step in (1, 2):
            got = mgr.restore(step).state
            assert torch.equal(got["w"], state(step)["w"]) and got["n"] == step


def test_warm_with_a_buffer_too_small_is_replaced_by_the_save(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.warm(nbytes=1000, wait=True)
        small = mgr._buffer
        mgr.save(1, state(1))
        mgr.wait(30)
        assert mgr._buffer is not small
        assert torch.equal(mgr.restore(1).state["w"], state(1)["w"])


def test_warm_needs_a_state_or_a_size(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store) as mgr, pytest.raises(CheckpointError):
        mgr.warm()
