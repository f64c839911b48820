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


def test_warm_with_a_buffer_too_small_is_grown_by_the_save(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.warm(nbytes=1000, wait=True)
        small, size, pid = mgr._buffer, mgr._buffer.size if mgr._buffer else 0, mgr.worker_pid
        mgr.save(1, state(1))
        mgr.wait(30)
        # grown in place: the same descriptor, so the same worker maps the new size
        assert mgr._buffer is small and small is not None and small.size > size
        assert mgr.worker_pid == pid
        assert torch.equal(mgr.restore(1).state["w"], state(1)["w"])


def test_an_unwarmed_manager_does_its_setup_off_the_first_save(
    local_store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without warm(): the worker process starts at construction, in a background thread;
    the first save grows the empty buffer in place and writes it with pwrite, never faulting
    pages in on the caller's thread (that happens afterwards, in the background)."""
    import threading

    from burst.checkpoint import manager as manager_mod
    from burst.checkpoint.staging import HostBuffer

    where: dict[str, list[str]] = {"start": [], "populate": [], "fault": []}
    start, populate = manager_mod.CheckpointManager._start_worker, HostBuffer.populate
    zero, pwrite = HostBuffer.zero, HostBuffer._pwrite
    written: list[int] = []  # bytes each pwrite on the caller's thread wrote

    def count(self: HostBuffer, data: Any, offset: int) -> None:
        written.append(len(memoryview(data).cast("B")))
        pwrite(self, data, offset)

    def record(kind: str, fn: Any) -> Any:
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            where[kind].append(threading.current_thread().name)
            return fn(*args, **kwargs)

        return wrapped

    monkeypatch.setattr(manager_mod.CheckpointManager, "_start_worker", record("start", start))
    monkeypatch.setattr(HostBuffer, "populate", record("populate", populate))
    monkeypatch.setattr(HostBuffer, "zero", record("fault", zero))
    monkeypatch.setattr(HostBuffer, "_pwrite", count)
    caller = threading.current_thread().name
    big = 300_000 * 4
    with CheckpointManager(local_store, chunk_size=CHUNK) as mgr:
        mgr.save(1, state(1))
        assert big in written  # the first touch of the big array's pages: pwrite
        buffer = mgr._buffer
        mgr.wait(30)
        written.clear()
        mgr.save(2, state(2))  # the mapping populated in the background: copied through it
        assert big not in written
        mgr.wait(30)
        assert buffer is not None and buffer.faulted == buffer.size and mgr._buffer is buffer
        for step in (1, 2):
            got = mgr.restore(step).state
            assert torch.equal(got["w"], state(step)["w"]) and got["n"] == step
    assert where["start"] and caller not in where["start"]
    assert where["populate"] and caller not in where["populate"]
    assert where["fault"] == []


def test_warm_needs_a_state_or_a_size(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store, start_worker=False) as mgr, pytest.raises(CheckpointError):
        mgr.warm()


def test_fresh_bytes_are_written_by_the_caller_and_helper_threads_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A first save's bytes (pages nobody touched yet): the caller pwrites pieces while
    helper threads populate and copy others through the mapping, from one queue; every
    byte lands once, in its place; a helper's failure reaches the caller."""
    import threading

    import numpy as np

    from burst.checkpoint import staging
    from burst.checkpoint.staging import HostBuffer

    rng = np.random.default_rng(5)
    parts = [
        (rng.integers(0, 256, n, dtype=np.uint8), off)
        for n, off in ((300_000, 0), (5, 300_032), (1 << 20, 300_096))
    ]
    caller = threading.current_thread()
    helped = threading.Event()
    by: dict[str, list[int]] = {"caller": [], "helper": []}  # append: atomic across threads
    pwrite, populate = HostBuffer._pwrite, staging._populate_write

    def caller_write(self: HostBuffer, data: Any, offset: int) -> None:
        assert threading.current_thread() is caller  # helpers never pwrite
        helped.wait(10)  # a helper writes a piece before the caller's first one lands
        by["caller"].append(offset)
        pwrite(self, data, offset)

    def helper_populate(array: Any, start: int, length: int) -> bool:
        assert threading.current_thread() is not caller
        by["helper"].append(start)
        helped.set()
        return populate(array, start, length)

    monkeypatch.setattr(HostBuffer, "_pwrite", caller_write)
    monkeypatch.setattr(staging, "_populate_write", helper_populate)
    buf = HostBuffer(0, prefault=False)
    try:
        buf.grow(300_096 + (1 << 20))
        buf.write_fresh(parts, threads=3, piece=64 << 10, min_per_thread=1)
        pieces = sum(-(-src.nbytes // (64 << 10)) for src, _ in parts)
        assert by["helper"] and len(by["caller"]) + len(by["helper"]) == pieces
        for src, off in parts:
            assert np.array_equal(buf.array[off : off + src.nbytes], src)
        assert not buf.array[300_000:300_032].any()  # padding untouched: zeros

        failed = threading.Event()

        def broken(array: Any, start: int, length: int) -> bool:
            failed.set()
            raise OSError("no memory")

        monkeypatch.setattr(staging, "_populate_write", broken)
        monkeypatch.setattr(HostBuffer, "_pwrite", lambda *args: failed.wait(10))
        with pytest.raises(OSError, match="no memory"):
            buf.write_fresh(parts, threads=2, piece=64 << 10, min_per_thread=1)
    finally:
        buf.close()
