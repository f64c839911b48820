"""SIGKILL of the training process mid-save: its worker (own session) still commits the
checkpoint, then frees the shared buffer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from burst.checkpoint import CheckpointManager

JOB = Path(__file__).with_name("trainer_job.py")


def test_worker_finishes_the_upload_after_the_trainer_dies(tmp_path: Path) -> None:
    store = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, str(JOB), str(store)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert proc.stdout is not None
    buffer = Path(proc.stdout.readline().strip())
    assert buffer.name.startswith("burst-ckpt-")
    os.killpg(proc.pid, signal.SIGKILL)  # the trainer's whole process group
    proc.wait()
    deadline = time.monotonic() + 120
    while (buffer.exists() or not (store / "latest.json").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not buffer.exists(), "the worker did not free the shared buffer"
    with CheckpointManager(str(store)) as mgr:
        restored = mgr.restore()
    g = torch.Generator().manual_seed(42)
    assert restored.step == 7 and torch.equal(
        restored.state["w"], torch.randn(4 << 20, generator=g)
    )
