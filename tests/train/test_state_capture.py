"""One implementation of state capture: the training engines save the RNG state the
checkpoint API defines (Python, numpy, torch CPU and CUDA), so a GPU resume restores its
CUDA generators instead of re-seeding them."""

from __future__ import annotations

import random
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from burst.checkpoint.state import rng_state
from burst.train.setup_state import apply_setup, capture_setup

REPO = Path(__file__).resolve().parents[2]


def _setup() -> SimpleNamespace:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    return SimpleNamespace(
        model=model, optimizer=torch.optim.SGD(model.parameters(), lr=0.1), scheduler=None
    )


def _draws() -> tuple[float, float, float]:
    return random.random(), float(np.random.rand()), float(torch.rand(1))


def test_the_engine_captures_every_generator_the_checkpoint_api_does() -> None:
    state = capture_setup(_setup(), 3, "full")  # type: ignore[arg-type]
    assert set(state["rng"]) == set(rng_state()) == {"python", "numpy", "torch", "cuda"}
    assert state["data_position"] == 3


def test_a_restored_state_repeats_the_draws() -> None:
    setup = _setup()
    state = capture_setup(setup, 7, "full")  # type: ignore[arg-type]
    first = _draws()
    # as a checkpoint may hand them back: lists where there were tuples
    state["rng"]["python"] = list(state["rng"]["python"])
    state["rng"]["numpy"] = list(state["rng"]["numpy"])
    assert apply_setup(setup, state) == 7  # type: ignore[arg-type]
    assert _draws() == first


def test_no_second_rng_capture_in_the_library() -> None:
    """torch's RNG state is read in one place (burst/checkpoint/state.py)."""
    readers = [
        p.relative_to(REPO)
        for p in (REPO / "burst").rglob("*.py")
        if re.search(r"get_rng_state(_all)?\(", p.read_text(encoding="utf-8"))
    ]
    assert readers == [Path("burst/checkpoint/state.py")]
