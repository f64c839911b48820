"""One state format: the library's ``capture_state``/``apply_state`` and the training engines
(``burst.train.setup_state.capture_setup``/``apply_setup``) write and read the same keys, and a
state written by older burst (the library's "data" key; the engines' "scheduler": None and no
"metadata") still restores, through a real checkpoint (a real worker process, a real store)."""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from burst.checkpoint import CheckpointError, CheckpointManager
from burst.checkpoint.state import apply_state, capture_state, rng_state
from burst.storage import ObjectStore
from burst.train.setup_state import apply_setup, capture_setup
from tests.checkpoint.ckpt_helpers import assert_same, make_model, snapshot, train_steps

REPO = Path(__file__).resolve().parents[2]


def _setup(seed: int = 0) -> Any:
    model = make_model(layers=2, width=8, seed=seed)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    return SimpleNamespace(model=model, optimizer=opt, scheduler=sched)


def _roundtrip(store: ObjectStore, state: dict[str, Any]) -> dict[str, Any]:
    with CheckpointManager(store, chunk_size=8192) as mgr:
        mgr.save(3, state, tier="full")
        mgr.wait()
        restored: dict[str, Any] = mgr.restore(3).state
    return restored


def test_capture_and_apply_are_written_once() -> None:
    defs = [
        f"{p.relative_to(REPO)}"
        for pkg in ("burst", "steps", "pipelines")
        for p in sorted((REPO / pkg).rglob("*.py"))
        if re.search(r"^def (capture|apply)_state\(", p.read_text(encoding="utf-8"), re.M)
    ]
    assert defs == ["burst/checkpoint/state.py"]


def test_engines_and_library_write_one_format() -> None:
    setup = _setup()
    train_steps(setup.model, setup.optimizer, 1, width=8)
    setup.scheduler.step()
    engine = capture_setup(setup, 5, "full", samples=40)
    library = capture_state(
        setup.model, setup.optimizer, setup.scheduler, step=5, data_position=5, samples=40
    )
    assert set(engine) == set(library) == {
        "step", "tier", "model", "metadata", "optimizer", "scheduler", "rng", "data_position",
        "samples",
    }  # fmt: skip
    assert set(capture_setup(setup, 5, "weights")) == {"step", "tier", "model", "metadata"}
    assert set(capture_state(setup.model, tier="weights")) == {"model", "metadata"}


def test_a_library_state_of_older_burst_still_applies(local_store: ObjectStore) -> None:
    """Before the one format the library wrote the data position under "data"."""
    setup = _setup()
    train_steps(setup.model, setup.optimizer, 2, width=8)
    old = {
        "model": setup.model.state_dict(),
        "metadata": {"run": "r"},
        "optimizer": setup.optimizer.state_dict(),
        "rng": rng_state(),
        "data": {"index": 12},
    }
    saved = snapshot(old)
    restored = _roundtrip(local_store, old)
    other = _setup(seed=3)
    applied = apply_state(restored, other.model, other.optimizer)
    assert applied.data_position == {"index": 12} == applied["data"]
    assert applied["metadata"] == {"run": "r"} == applied.metadata
    assert_same(snapshot(other.model.state_dict()), saved["model"])
    # an engine resumes from it too (its data position, an int, under the old key)
    old_int = {**restored, "data": 9}
    assert apply_setup(_setup(seed=4), old_int) == 9  # type: ignore[arg-type]


def test_an_engine_state_of_older_burst_still_applies(local_store: ObjectStore) -> None:
    """Before the one format the engines wrote "scheduler": None without a scheduler, and
    no "metadata"."""
    setup = _setup()
    setup.scheduler = None
    train_steps(setup.model, setup.optimizer, 2, width=8)
    random.seed(7)
    old = {
        "step": 6,
        "tier": "full",
        "model": setup.model.state_dict(),
        "optimizer": setup.optimizer.state_dict(),
        "scheduler": None,
        "rng": rng_state(),
        "data_position": 6,
        "samples": 48,
    }
    draw = (random.random(), float(np.random.rand()))
    restored = _roundtrip(local_store, old)
    other = _setup(seed=5)  # a scheduler the old state has none for: left as it is
    assert apply_setup(other, restored) == 6  # type: ignore[arg-type]
    assert (random.random(), float(np.random.rand())) == draw
    applied = apply_state(restored, _setup(seed=6).model)
    assert (applied.samples, applied.step, applied.metadata) == (48, 6, {})


def test_an_engine_needs_a_full_state() -> None:
    setup = _setup()
    weights = capture_setup(setup, 2, "weights")
    with pytest.raises(CheckpointError, match="not a full checkpoint: no 'optimizer'"):
        apply_setup(setup, weights, "checkpoint step 2")  # type: ignore[arg-type]
