"""Build the state to checkpoint from torch objects, and apply a restored one.

``capture_state`` returns a plain nested dict; pass it to ``CheckpointManager.save``. Tier
"weights" holds the model (and metadata); tier "full" adds optimizer, LR scheduler, RNG states
(Python, numpy, torch CPU and CUDA) and the data-loader position.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np

from burst.checkpoint.manifest import check_tier
from burst.errors import CheckpointError


def rng_state() -> dict[str, Any]:
    """Python, numpy, torch CPU and (on a GPU host) every CUDA device's RNG state: all a
    resumed run must restore to repeat the uninterrupted one. The one implementation, used
    by ``capture_state`` and by the training engines."""
    import torch

    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }


def set_rng_state(state: dict[str, Any]) -> None:
    import torch

    # a state that went through a checkpoint may come back with lists for tuples
    random.setstate(_as_tuples(state["python"]))
    np.random.set_state(tuple(state["numpy"]))
    torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _as_tuples(obj: Any) -> Any:
    return tuple(_as_tuples(o) for o in obj) if isinstance(obj, list | tuple) else obj


def capture_state(
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    tier: str = "full",
    data_position: Any = None,
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The state of a training run, as the given tier asks."""
    check_tier(tier)
    state: dict[str, Any] = {"model": model.state_dict(), "metadata": metadata or {}}
    if tier == "full":
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        state["rng"] = rng_state()
        state["data"] = data_position
    return state


def check_fits(model_state: Any, saved: Any, where: str) -> None:
    """A checkpoint of a differently shaped model is one line naming the checkpoint and
    the first tensor that does not fit (CheckpointError, exit 2), before anything loads."""
    if not isinstance(saved, dict):
        raise CheckpointError("the checkpoint holds no model state dict", where=where)
    for name, tensor in model_state.items():
        if name not in saved:
            raise CheckpointError(
                f"does not fit the model: tensor {name!r} is not in the checkpoint", where=where
            )
        mine, theirs = tuple(getattr(tensor, "shape", ())), tuple(getattr(saved[name], "shape", ()))
        if mine != theirs:
            raise CheckpointError(
                f"does not fit the model: tensor {name!r} has shape {list(theirs)} in the "
                f"checkpoint, {list(mine)} in the model",
                where=where,
            )
    extra = [k for k in saved if k not in model_state]
    if extra:
        raise CheckpointError(
            f"does not fit the model: tensor {extra[0]!r} of the checkpoint is not in the model",
            where=where,
        )


def apply_state(
    state: dict[str, Any],
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    strict: bool = True,
    restore_rng: bool = True,
) -> dict[str, Any]:
    """Load a restored state into the objects; returns {"data": ..., "metadata": ...}."""
    if "model" not in state:
        raise CheckpointError("restored state has no 'model' entry")
    if strict:
        check_fits(model.state_dict(), state["model"], "restored state")
    model.load_state_dict(state["model"], strict=strict)
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and "scheduler" in state:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng and "rng" in state:
        set_rng_state(state["rng"])
    return {"data": state.get("data"), "metadata": state.get("metadata") or {}}
