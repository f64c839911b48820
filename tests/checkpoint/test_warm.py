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
    start, populate = manager_mod.CheckpointManager._spawn, HostBuffer.populate
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

    monkeypatch.setattr(manager_mod.CheckpointManager, "_spawn", record("start", start))
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
    """A first save's bytes (pages nobody touched yet) in a one-file buffer: one thread at a
    time pwrites into the file, the others populate and copy pieces through the mapping, from
    the far end of the same queue; every byte lands once, in its place; a helper's failure
    reaches the caller."""
    import threading

    import numpy as np

    from burst.checkpoint import staging
    from burst.checkpoint.staging import HostBuffer

    rng = np.random.default_rng(5)
    parts = [
        (rng.integers(0, 256, n, dtype=np.uint8), off)
        for n, off in ((300_000, 0), (5, 300_032), (1 << 20, 300_096))
    ]
    mapped = threading.Event()
    lock = threading.Lock()
    writing: list[int] = []  # pwrites in flight
    by: dict[str, list[int]] = {"pwrite": [], "mapped": []}  # append: atomic across threads
    pwrite, populate = HostBuffer._pwrite, staging._populate_write

    def one_writer(self: HostBuffer, data: Any, offset: int) -> None:
        with lock:
            writing.append(offset)
            assert len(writing) == 1  # never two writers in one file
        mapped.wait(10)  # a piece goes through the mapping before the first pwrite lands
        by["pwrite"].append(offset)
        try:
            pwrite(self, data, offset)
        finally:
            with lock:
                writing.remove(offset)

    def through_mapping(array: Any, start: int, length: int) -> bool:
        by["mapped"].append(start)
        mapped.set()
        return populate(array, start, length)

    monkeypatch.setattr(HostBuffer, "_pwrite", one_writer)
    monkeypatch.setattr(staging, "_populate_write", through_mapping)
    buf = HostBuffer(0, prefault=False, segments=1)
    try:
        buf.grow(300_096 + (1 << 20))
        buf.write_fresh(parts, threads=3, piece=64 << 10, min_per_thread=1)
        pieces = sum(-(-src.nbytes // (64 << 10)) for src, _ in parts)
        assert by["mapped"] and len(by["pwrite"]) + len(by["mapped"]) == pieces
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


def test_two_threads_pwrite_fresh_bytes_at_once_into_files_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A buffer of several memfds side by side: two threads pwrite fresh bytes at the same
    time, never two into one file; the bytes land in place, and the worker's mapping of the
    same files (AttachedBuffer, by the paths it is sent) reads the same bytes."""
    import threading

    import numpy as np

    from burst.checkpoint.attached import AttachedBuffer
    from burst.checkpoint.staging import HostBuffer

    rng = np.random.default_rng(6)
    pwrite = HostBuffer._pwrite
    lock = threading.Lock()
    writing: list[int] = []  # the file of each pwrite in flight
    files: set[int] = set()
    met = threading.Barrier(2, timeout=10)  # the first two pwrites are in flight together
    calls = [0]

    def pwrite_once_per_file(self: HostBuffer, data: Any, offset: int) -> None:
        n = len(memoryview(data).cast("B"))
        seg = offset // self.segment
        assert (offset + n - 1) // self.segment == seg  # a piece never spans two files
        with lock:
            assert seg not in writing
            writing.append(seg)
            files.add(seg)
            calls[0] += 1
            first = calls[0] <= 2
        if first:
            met.wait()
        try:
            pwrite(self, data, offset)
        finally:
            with lock:
                writing.remove(seg)

    monkeypatch.setattr(HostBuffer, "_pwrite", pwrite_once_per_file)
    monkeypatch.delenv("BURST_CHECKPOINT_SHM_DIR", raising=False)  # that would be one file
    buf = HostBuffer(0, prefault=False, segments=3)
    try:
        assert len(buf.memfds) == 3, "Linux has memfd_create: the buffer is three memfds"
        buf.grow(3 << 20)
        assert buf.size >= 3 << 20 and buf.segment * 3 == buf.size
        parts = [
            (rng.integers(0, 256, n, dtype=np.uint8), off)
            for n, off in ((1_500_000, 0), (1_400_000, 1_500_032))
        ]
        buf.write_fresh(parts, threads=2, piece=256 << 10, min_per_thread=1)
        assert len(files) == 3
        for src, off in parts:
            assert np.array_equal(buf.array[off : off + src.nbytes], src)
        assert not buf.array[1_500_000:1_500_032].any()
        seen = AttachedBuffer(buf.worker_paths, buf.size)
        try:
            assert seen.view.readonly and bytes(seen.view) == buf.array.tobytes()
        finally:
            seen.close()
    finally:
        buf.close()


def test_populate_maps_each_file_on_a_thread_of_its_own_and_keeps_the_bytes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``populate(threads=2)`` over a buffer of three memfds (what warm() and a prefaulted
    buffer do): two files are allocated and mapped at the same time, each span by one call,
    every file once, the bytes written before stay as they were, and the buffer counts as
    faulted in; where the kernel cannot populate, it does not."""
    import threading

    import numpy as np

    from burst.checkpoint import staging
    from burst.checkpoint.attached import AttachedBuffer
    from burst.checkpoint.staging import HostBuffer

    monkeypatch.delenv("BURST_CHECKPOINT_SHM_DIR", raising=False)  # that would be one file
    populate, fallocate = staging._populate_write, staging.os.posix_fallocate
    met = threading.Barrier(2, timeout=10)
    lock = threading.Lock()
    spans: list[tuple[int, int]] = []
    allocated: list[int] = []

    def two_at_once(array: Any, start: int, length: int) -> bool:
        with lock:
            spans.append((start, start + length))
            first = len(spans) <= 2
        if first:
            met.wait()  # the first two files are populated together
        return populate(array, start, length)

    def record_fallocate(fd: int, offset: int, length: int) -> None:
        with lock:
            allocated.append(fd)
        fallocate(fd, offset, length)

    monkeypatch.setattr(staging, "_populate_write", two_at_once)
    monkeypatch.setattr(staging.os, "posix_fallocate", record_fallocate)
    rng = np.random.default_rng(7)
    buf = HostBuffer(0, prefault=False, segments=3)
    try:
        assert len(buf.memfds) == 3, "Linux has memfd_create: the buffer is three memfds"
        buf.grow(3 << 20)
        data = rng.integers(0, 256, 1_000_000, dtype=np.uint8)
        buf.write_fresh([(data, 40_960)], threads=1)  # pwrite: not mapped yet
        assert buf.faulted == 0
        buf.populate(threads=2)
        assert buf.faulted == buf.size
        assert sorted(spans) == [(i * buf.segment, (i + 1) * buf.segment) for i in range(3)]
        assert sorted(allocated) == sorted(buf.memfds)
        assert np.array_equal(buf.array[40_960 : 40_960 + data.nbytes], data)
        assert not buf.array[:40_960].any() and not buf.array[40_960 + data.nbytes :].any()
        seen = AttachedBuffer(buf.worker_paths, buf.size)
        try:
            assert bytes(seen.view) == buf.array.tobytes()
        finally:
            seen.close()
    finally:
        buf.close()

    monkeypatch.setattr(staging, "_populate_write", lambda *args: False)
    buf = HostBuffer(1 << 20, prefault=False, segments=2)
    try:
        buf.populate(threads=2)
        assert buf.faulted == 0  # not mapped: the next save writes through pwrite again
    finally:
        buf.close()
    buf = HostBuffer(1 << 20, segments=2)  # prefault: zeros through the mapping instead
    try:
        assert buf.faulted == buf.size and not buf.array.any()
    finally:
        buf.close()


def test_a_save_right_after_construction_does_not_wait_for_the_worker_to_be_ready(
    local_store: ObjectStore, tmp_path: Any
) -> None:
    """The worker started at construction holds before its "ready" (a pause fault point)
    until the test lets it go: the first save returns all the same, its request waiting in
    the worker's stdin, and commits once the worker is up. A worker that never gets ready
    fails that save as a dead worker would: ``wait`` starts another and sends it again."""
    import threading

    pause = tmp_path / "pause"
    pause.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": "worker-start",
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{pause}",
    }
    with CheckpointManager(local_store, chunk_size=CHUNK, worker_env=env) as mgr:
        saving = threading.Thread(target=mgr.save, args=(1, state(1)))
        saving.start()
        saving.join(60)
        returned = not saving.is_alive()
        (pause / "resume").touch()  # let the worker go (also when the save hung)
        assert returned, "the first save waited for the worker to be ready"
        result = mgr.wait(60)
        assert result is not None and result.step == 1
        got = mgr.restore(1).state
        assert torch.equal(got["w"], state(1)["w"])

    env = {
        "BURST_CHECKPOINT_FAULT": "worker-start",
        "BURST_CHECKPOINT_FAULT_ONCE": str(tmp_path / "once"),
    }
    with CheckpointManager(local_store, chunk_size=CHUNK, worker_env=env) as mgr:
        mgr.save(2, state(2))  # its worker is killed before "ready" (once)
        result = mgr.wait(60)
        assert result is not None and result.step == 2 and (tmp_path / "once").exists()
        assert torch.equal(mgr.restore(2).state["w"], state(2)["w"])


def test_a_buffer_the_starting_worker_did_not_inherit_gets_a_worker_of_its_own(
    local_store: ObjectStore, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The construction could not make the buffer (the worker starts without one), so the
    first save makes one while that worker still starts: its request must not go to a
    worker that cannot see those memfds; the save is committed by a worker that can."""
    import threading
    import time

    from burst.checkpoint import manager as manager_mod

    real = manager_mod.HostBuffer
    made: list[int] = []

    def first_fails(size: int, *args: Any, **kwargs: Any) -> Any:
        made.append(size)
        if len(made) == 1:
            raise OSError("no memfd at construction")
        return real(size, *args, **kwargs)

    monkeypatch.setattr(manager_mod, "HostBuffer", first_fails)
    pause = tmp_path / "pause"
    pause.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": "worker-start",
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{pause}",
        "BURST_CHECKPOINT_FAULT_ONCE": str(tmp_path / "once"),
    }
    with CheckpointManager(local_store, chunk_size=CHUNK, worker_env=env) as mgr:
        assert mgr._buffer is None
        saving = threading.Thread(target=mgr.save, args=(1, state(1)))
        saving.start()
        deadline = time.monotonic() + 60
        while not (pause / "paused").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        (pause / "resume").touch()  # the first worker (no buffer) goes on
        saving.join(60)
        result = mgr.wait(60)
        assert result is not None and result.step == 1 and len(made) == 2
        assert torch.equal(mgr.restore(1).state["w"], state(1)["w"])
