"""SIGKILL of the training process mid-save: its worker (own session) still commits the
checkpoint, then frees the shared buffer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from burst.checkpoint import CheckpointManager

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

JOB = Path(__file__).with_name("trainer_job.py")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return (
        Path(f"/proc/{pid}").is_dir()
        and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()
    )


def test_worker_finishes_the_upload_after_the_trainer_dies(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, str(JOB), str(store)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    buffer, worker = proc.stdout.readline().split()
    assert alive(int(worker))
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer's whole process group
    proc.wait()
    deadline = time.monotonic() + 120
    while alive(int(worker)) and time.monotonic() < deadline:
        time.sleep(0.1)
    # the worker committed the save in hand, then exited (and its buffer went with it)
    assert not alive(int(worker)), "the worker outlived its trainer"
    assert not Path(buffer).exists()
    with CheckpointManager(str(store), start_worker=False) as mgr:
        restored = mgr.restore()
    g = torch.Generator().manual_seed(42)
    assert restored.step == 7
    assert torch.equal(restored.state["w"], torch.randn(4 << 20, generator=g))
