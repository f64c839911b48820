"""A restored checkpoint equals the saved state bit for bit: full, weights, delta chains."""

from __future__ import annotations

import math
import random
import time

import numpy as np
import pytest
import torch
from ckpt_helpers import assert_same, make_model, snapshot, train_steps

from burst.checkpoint import (
    CheckpointError,
    CheckpointManager,
    apply_state,
    capture_state,
    load_manifest,
)
from burst.storage import ObjectStore


def odd_state() -> dict:
    """Every kind of leaf the tree encoder supports."""
    return {
        "bf16": torch.randn(33, 7).to(torch.bfloat16),
        "i64": torch.arange(10, dtype=torch.int64).reshape(2, 5),
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.empty(0, 4),
        "strided": torch.randn(8, 8).t(),
        "np": np.arange(12, dtype=np.float16).reshape(3, 4),
        "nan": float("nan"),
        "inf": -math.inf,
        "tuple": (1, "a", None, (2.5, b"\x00\xff")),
        "intkeys": {0: "zero", 3: [1, 2]},
        "__dunder": "kept",
        "npscalar": np.int32(7),
        "dtype": torch.float16,
    }


def test_odd_state_roundtrips(local_store: ObjectStore) -> None:
    state = odd_state()
    with CheckpointManager(local_store, chunk_size=4096) as mgr:
        mgr.save(5, state, tier="weights")
        mgr.wait()
        restored = mgr.restore()
    assert (restored.step, restored.tier) == (5, "weights")
    expected = dict(state)
    expected["strided"] = state["strided"].contiguous()
    assert_same(restored.state, expected)


def test_full_and_delta_chain_bit_exact(store: ObjectStore) -> None:
    model = make_model(layers=6)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    saved = {}
    with CheckpointManager(store, chunk_size=16 << 10) as mgr:
        for step in range(1, 5):
            train_steps(model, opt, 1)
            sched.step()
            if step == 2:  # fine-tune from here: only the last layer keeps training
                for p in model[:-1].parameters():
                    p.requires_grad_(False)
            state = capture_state(
                model,
                opt,
                sched,
                data_position={"index": step * 4},
                metadata={"run": "t", "step": step},
            )
            saved[step] = snapshot(state)
            mgr.save(step, state, tier="full")
            result = mgr.wait()
            assert result is not None and result.step == step
        # the frozen layers' chunks were not uploaded again
        assert result.reused_chunks > 0
        assert result.uploaded_bytes < result.total_bytes
        for step in range(1, 5):
            restored = mgr.restore(step)
            assert restored.step == step
            assert_same(restored.state, saved[step])
        assert mgr.latest() is not None and mgr.latest().step == 4


def test_restore_into_model_resumes_exactly(local_store: ObjectStore) -> None:
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    train_steps(model, opt, 2)
    random.seed(1)
    np.random.seed(1)
    torch.manual_seed(1)
    with CheckpointManager(local_store, chunk_size=8192) as mgr:
        mgr.save(2, capture_state(model, opt, data_position=17))
        mgr.wait()
        draws = (random.random(), np.random.rand(), torch.rand(1))
        train_steps(model, opt, 2)
        after = snapshot(model.state_dict())
        model2 = make_model(seed=5)
        opt2 = torch.optim.SGD(model2.parameters(), lr=0.1, momentum=0.9)
        restored = mgr.restore(into=capture_state(model2, opt2))
        info = apply_state(restored.state, model2, opt2)
    assert info["data"] == 17
    assert (random.random(), np.random.rand()) == draws[:2]
    assert torch.equal(torch.rand(1), draws[2])
    train_steps(model2, opt2, 2)  # the same batches: RNG state was restored
    assert_same(snapshot(model2.state_dict()), after)


def test_weights_tier_holds_no_optimizer(local_store: ObjectStore) -> None:
    model = make_model()
    opt = torch.optim.Adam(model.parameters())
    train_steps(model, opt, 1)
    with CheckpointManager(local_store) as mgr:
        mgr.save(1, capture_state(model, opt, tier="weights"), tier="weights")
        mgr.wait()
        ref = mgr.latest("weights")
        assert ref is not None
        manifest = load_manifest(local_store, ref)
        assert set(manifest.tree) == {"model", "metadata"}
        assert mgr.latest("full") is None


def test_unsupported_state_is_a_clear_error(local_store: ObjectStore) -> None:
    with CheckpointManager(local_store) as mgr, pytest.raises(CheckpointError) as err:
        mgr.save(1, {"model": {"w": torch.zeros(2)}, "fn": object()})
    assert "state .fn" in err.value.one_line()
    with CheckpointManager(local_store) as mgr, pytest.raises(CheckpointError):
        mgr.save(1, {}, tier="everything")


def test_skip_when_busy_and_status(local_store: ObjectStore) -> None:
    big = {"w": torch.randn(4 << 20)}
    with CheckpointManager(local_store, chunk_size=1 << 20, concurrency=1) as mgr:
        assert mgr.save(1, big)
        skipped = not mgr.save(2, big, if_busy="skip")
        status = mgr.status()
        mgr.wait()
        assert mgr.status().in_flight is None
        assert mgr.status().last_committed is not None
    # the second save either found the worker busy (skipped) or the first already committed
    assert skipped or status.in_flight is None
    assert {r.step for r in mgr.checkpoints()} == ({1} if skipped else {1, 2})


def test_paced_upload_speeds_up_when_someone_waits(local_store: ObjectStore) -> None:
    """upload_rate paces a background upload (here 1 KiB/s: hours for 2 MiB); wait() lifts it."""
    state = {"w": torch.randn(512, 1024)}
    with CheckpointManager(local_store, chunk_size=64 << 10, upload_rate=1024) as mgr:
        mgr.save(1, state)
        time.sleep(0.3)
        assert mgr.status().in_flight == 1  # still paced
        mgr.wait(timeout=120)  # hang detection only: unpaced, this takes well under a second
        assert_same(mgr.restore().state, state)


def test_buffer_directory_too_small_is_one_clear_error(
    local_store: ObjectStore, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from burst.checkpoint.staging import SHM_DIR_ENV, HostBuffer

    monkeypatch.setenv(SHM_DIR_ENV, str(tmp_path))
    st = os.statvfs(tmp_path)
    with pytest.raises(CheckpointError, match=SHM_DIR_ENV):
        HostBuffer(st.f_bavail * st.f_frsize + (1 << 30))
    # a directory with room works as the buffer's home, and the buffer file goes with close()
    with CheckpointManager(local_store, chunk_size=64 << 10) as mgr:
        mgr.save(1, {"w": torch.arange(1000)})
        assert mgr._buffer is not None and mgr._buffer.path.parent == tmp_path
        mgr.wait()
    assert not list(tmp_path.glob("burst-ckpt-*"))
    assert mgr.restore().state["w"].equal(torch.arange(1000))


def test_state_that_grows_grows_the_buffer_for_the_same_worker(local_store: ObjectStore) -> None:
    small = {"w": torch.randn(1000)}
    big = {"w": torch.randn(300_000), "extra": torch.randn(50_000)}
    with CheckpointManager(local_store, chunk_size=64 << 10) as mgr:
        mgr.save(1, small)
        mgr.wait()
        first_pid, buffer = mgr.worker_pid, mgr._buffer
        assert buffer is not None
        size = buffer.size
        mgr.save(2, big)
        mgr.wait()
        # grown in place (same descriptor): the worker maps the new size, no restart
        assert mgr.worker_pid is not None and mgr.worker_pid == first_pid
        assert mgr._buffer is buffer and buffer.size > size
        mgr.save(3, small)  # fits in the big buffer: same worker
        mgr.wait()
        assert_same(mgr.restore(1).state, small)
        assert_same(mgr.restore(2).state, big)
        assert_same(mgr.restore(3).state, small)
