"""A writer's work while nobody waits for the save runs on its ``background_concurrency``
threads, at the lower CPU priority ``nice``; once someone waits (``hurry``) ``concurrency``
threads at the process's own priority join in. A real CheckpointWriter on a real local store
whose chunk puts are counted (and held briefly, so that several would overlap if the writer
let them) and whose threads' priorities are recorded."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from burst.checkpoint.layout import build_layout
from burst.checkpoint.worker import background_uploads
from burst.checkpoint.writer import CheckpointWriter
from burst.storage import LocalStore

CHUNK = 64 << 10


class CountingStore(LocalStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.now = self.most = 0
        self.priorities: set[int] = set()
        self._lock = threading.Lock()

    def put_bytes(self, key: str, data: bytes | memoryview) -> None:
        if not key.startswith("chunks/"):
            super().put_bytes(key, data)
            return
        with self._lock:
            self.now += 1
            self.most = max(self.most, self.now)
            self.priorities.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        time.sleep(0.01)
        super().put_bytes(key, data)
        with self._lock:
            self.now -= 1


@pytest.mark.parametrize("hurried", [False, True])
def test_background_uploads_are_bounded_until_someone_waits(tmp_path: Path, hurried: bool) -> None:
    store = CountingStore(tmp_path / "store")
    writer = CheckpointWriter(store, concurrency=4, background_concurrency=1, nice=5)
    arrays = [np.random.default_rng(1).integers(0, 255, 16 * CHUNK, dtype=np.uint8)]
    entries, total = build_layout(arrays, CHUNK)
    buf = np.zeros(total, dtype=np.uint8)
    buf[: arrays[0].nbytes] = arrays[0]
    if hurried:
        writer.hurry.set()
    try:
        m = writer.write(
            memoryview(buf), entries, {"__ndarray__": 0}, step=1, tier="full", chunk_size=CHUNK
        )
    finally:
        writer.close()
    assert m.stats["uploaded_chunks"] == 16
    base = os.getpriority(os.PRIO_PROCESS, 0)
    if hurried:
        assert store.most > 1 and store.priorities == {base}
    else:
        assert store.most == 1 and store.priorities == {min(19, base + 5)}


def test_background_uploads_take_a_quarter_of_the_cores() -> None:
    assert background_uploads(8) >= 1
    assert background_uploads(1) == 1


def _switches(native_id: int) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return sum(
        int(line.split()[1])
        for line in status.splitlines()
        if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"))
    )


def test_an_idle_writers_threads_sleep_until_there_is_work() -> None:
    """An idle writer (every training process holds one between saves) costs no CPU: its
    threads block until work is submitted, they do not wake to poll (before: every thread
    woke every 50 ms, about 1 % of a core per worker process). Counted in each thread's
    context switches over half a second, not timed."""
    from burst.checkpoint.writer import Lanes

    hurry = threading.Event()
    lanes = Lanes(4, 1, 19, hurry)
    try:
        threads = [t for t in threading.enumerate() if t.name.startswith("ckpt-")]
        assert len(threads) >= 5 and all(t.native_id for t in threads)
        time.sleep(0.1)  # each has reached its wait
        before = {t.native_id: _switches(t.native_id) for t in threads if t.native_id}
        time.sleep(0.5)
        after = {tid: _switches(tid) for tid in before}
        assert all(after[tid] - before[tid] <= 1 for tid in before), (before, after)
        assert lanes.submit(lambda: 7).result(timeout=10) == 7  # work still wakes them
    finally:
        lanes.shutdown()
