"""DeepSpeed ZeRO-3 with several ranks and no shared filesystem (issue 18), real DeepSpeed on
CPU with gloo (tests/checkpoint/ds_ranks_job.py):

* 2 torchrun ranks, each saving into its own local directory and uploading its own files
  (sharded: one global manifest); a fresh engine on fresh directories restores step 2, each
  rank fetching only its own files, and continues bit-identically;
* the same checkpoint resumed by ONE rank: DeepSpeed's universal checkpoint (converted on
  restore, no user step), and the 2 steps after it match the 2-rank run within a relative
  1e-5 (the job computes the same averaged gradient on any world size by accumulating
  micro batches; what differs is the order of float sums, ~1e-7 relative per step in fp32,
  while a lost or mis-sliced optimizer moment moves the parameters by ~1e-2 here).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from burst.storage.loopback import free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

JOB = Path(__file__).with_name("ds_ranks_job.py")
RTOL = 1e-5


def run(world: int, store: Path, work: Path, phase: str) -> list[dict[str, Any]]:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    if world > 1:
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={world}", str(JOB), str(store), str(work), phase,
        ]  # fmt: skip
    else:
        env["MASTER_PORT"] = str(free_port())
        cmd = [sys.executable, str(JOB), str(store), str(work), phase]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert len(lines) == world, proc.stdout[-2000:]
    return sorted((json.loads(ln[7:]) for ln in lines), key=lambda d: int(d["rank"]))


def test_zero3_ranks_upload_their_own_files_and_resume_on_another_world_size(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store"
    saved = run(2, store, tmp_path / "work", "save")
    for r in saved:
        rank = r["rank"]
        assert r["b"] == r["a"], f"rank {rank}: the resumed engine is not bit-identical"
        assert r["restored"]["universal"] is False
        assert r["restored"]["files"] == [
            f"zero_pp_rank_{rank}_mp_rank_00_model_states.pt",
            f"zero_pp_rank_{rank}_mp_rank_00_optim_states.pt",
        ]  # its own files only: no other rank's shard crossed to this "node"
    (one,) = run(1, store, tmp_path / "work", "resume")
    assert one["restored"]["universal"] is True and one["restored"]["saved_world"] == 2
    assert len(one["restored"]["files"]) == 4  # every rank's files, for the conversion
    worst = 0.0
    for got, want in zip(one["params"], saved[0]["params"], strict=True):
        for g, w in zip(got, want, strict=True):
            worst = max(worst, abs(g - w) / max(abs(w), 1e-3))
    print(f"2 -> 1 ranks: largest relative parameter difference after 2 steps {worst:.2e}")
    assert worst <= RTOL
