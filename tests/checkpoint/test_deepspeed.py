"""DeepSpeed on CPU: its shared-memory op, which serves only inference all-reduce, is not built
(``burst.train.deepspeed_engine.skip_inference_ops``: it cost a minute at every fresh install).

Exact resume is checked where it runs: ZeRO-2 through the train step
(tests/train/test_deepspeed_run.py: preempted, resumed from the store in a fresh pod, the
weights of a run without preemption; ZeRO-1 and ZeRO-2 are one optimizer in DeepSpeed,
runtime/zero/stage_1_and_2.py, with one state_dict and one file layout, so 2 stands for both),
and ZeRO-3 with two ranks (tests/checkpoint/test_deepspeed_ranks.py: a fresh engine on fresh
directories, bit-identical, and resumed on another world size).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


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
