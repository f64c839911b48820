"""DeepSpeed on CPU (ZeRO-1, gloo; ZeRO-3 in test_deepspeed_ranks.py): save through the chunked
upload, restore into a fresh engine, and the next two steps give bit-identical parameters.

Each phase is its own process (a real torch.distributed process group per run). DeepSpeed's
shared-memory op, which serves only inference all-reduce, is not built on CPU
(``burst.train.deepspeed_engine.skip_inference_ops``: it cost a minute at every fresh install).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from burst.storage.loopback import free_port

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

JOB = Path(__file__).with_name("ds_job.py")


def run(stage: int, store: Path, work: Path, phase: str) -> str:
    import os

    env = dict(os.environ, MASTER_PORT=str(free_port()))
    proc = subprocess.run(
        [sys.executable, str(JOB), str(stage), str(store), str(work), phase],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.slow
# ZeRO-1 and ZeRO-2 are one optimizer in DeepSpeed (runtime/zero/stage_1_and_2.py), with one
# state_dict and one file layout (zero_pp_rank_*_optim_states.pt); ZeRO-2 differs only in
# how gradients are partitioned in memory, which no checkpoint sees: 1 stands for both.
# ZeRO-3's exact resume (a fresh engine on fresh directories, everything from the store, the
# next steps bit-identical) is checked with two ranks by
# tests/checkpoint/test_deepspeed_ranks.py, which also resumes it on one.
@pytest.mark.parametrize("stage", [1])
def test_deepspeed_resume_is_exact(tmp_path: Path, stage: int) -> None:
    store = tmp_path / "store"
    expected = run(stage, store, tmp_path / "work-a", "save")
    assert (store / "latest.json").is_file()
    # a different machine: a fresh local directory, everything comes from the store
    resumed = run(stage, store, tmp_path / "work-b", "resume")
    assert len(expected) == 64 and resumed == expected


def test_on_cpu_the_inference_shm_op_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """DeepSpeed's comm backend builds its shared-memory all-reduce op on CPU as it starts (70
    CPU-seconds at every fresh install here); burst marks it incompatible, and DeepSpeed's own
    build_shm_op then returns None without compiling anything."""
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    import deepspeed.ops
    from deepspeed.comm.torch import build_shm_op

    from burst.train.deepspeed_engine import skip_inference_ops

    before = deepspeed.ops.__compatible_ops__.get("deepspeed_shm_comm")
    try:
        skip_inference_ops()
        assert build_shm_op() is None
    finally:
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = before
