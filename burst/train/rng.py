"""The RNG states a resumed run must restore to repeat the uninterrupted run exactly."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def rng_states() -> dict[str, Any]:
    """torch, numpy and python RNG states, as a checkpoint carries them."""
    return {
        "torch": torch.get_rng_state(),
        "numpy": np.random.get_state(),
        "python": random.getstate(),
    }


def set_rng_states(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    np.random.set_state(tuple(rng["numpy"]))  # type: ignore[arg-type]
    random.setstate(_as_tuples(rng["python"]))


def _as_tuples(obj: Any) -> Any:
    return tuple(_as_tuples(o) for o in obj) if isinstance(obj, list | tuple) else obj
