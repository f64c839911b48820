"""Build the state to checkpoint from torch objects, and apply a restored one.

``capture_state`` returns a plain nested dict; pass it to ``CheckpointManager.save``. Tier
"weights" holds the model (and metadata); tier "full" adds optimizer, LR scheduler, RNG states
(Python, numpy, torch CPU and CUDA) and the data-loader position. One format: the training
engines (``burst.train.engine``) save and load their states through these two functions too;
a state written under an older key (``LEGACY_KEYS``) still applies.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
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


#: keys a state of older burst versions may hold, and the key they are read as: the
#: library's ``capture_state`` wrote the data position under "data" before the library and
#: the training engines shared this one format
LEGACY_KEYS = {"data": "data_position"}


def capture_state(
    model: Any,
    optimizer: Any = None,
    scheduler: Any = None,
    *,
    tier: str = "full",
    data_position: Any = None,
    metadata: dict[str, Any] | None = None,
    step: int | None = None,
    samples: int | None = None,
) -> dict[str, Any]:
    """The state of a training run, as the given tier asks: the one format of a checkpoint's
    state, written by the library's users and by the training engines alike.

    Keys: "model" (its state dict) and "metadata" (``metadata`` or {}); "step" and "tier"
    when ``step`` is given; tier "full" adds "optimizer" and "scheduler" (when given), "rng"
    (``rng_state``), "data_position" (the data loader's position: any JSON-able value or
    array tree) and "samples" (samples consumed, when given: a run of several ranks)."""
    check_tier(tier)
    state: dict[str, Any] = {"model": model.state_dict(), "metadata": metadata or {}}
    if step is not None:
        state.update(step=step, tier=tier)
    if tier == "full":
        if optimizer is not None:
            state["optimizer"] = optimizer.state_dict()
        if scheduler is not None:
            state["scheduler"] = scheduler.state_dict()
        state["rng"] = rng_state()  # CUDA included: a GPU resume restores, never re-seeds
        state["data_position"] = data_position
        if samples is not None:
            state["samples"] = samples
    return state


def data_position(state: dict[str, Any]) -> Any:
    """The data position a state holds (also one written under a legacy key)."""
    if "data_position" in state:
        return state["data_position"]
    for old, new in LEGACY_KEYS.items():
        if new == "data_position" and old in state:
            return state[old]
    return None


@dataclass(frozen=True)
class Applied:
    """What ``apply_state`` hands back besides the loaded objects. ``applied["data"]`` and
    ``applied["metadata"]`` read as the dict it returned before."""

    data_position: Any
    metadata: dict[str, Any]
    samples: int | None = None
    step: int | None = None

    def __getitem__(self, key: str) -> Any:
        if key == "data":
            return self.data_position
        if key == "metadata":
            return self.metadata
        raise KeyError(key)


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
    full: bool = False,
    where: str = "restored state",
) -> Applied:
    """Load a restored state (``capture_state``'s format, or an older one) into the objects.

    ``strict``: the model's tensors must match the checkpoint's (``check_fits``, before
    anything loads). ``full``: the state must be a full one (optimizer, RNG states, data
    position: a training engine's resume), else CheckpointError naming what is missing."""
    if "model" not in state:
        raise CheckpointError("restored state has no 'model' entry", where=where)
    if full:
        missing = [k for k in ("optimizer", "rng") if k not in state]
        if data_position(state) is None:
            missing.append("data_position")
        if missing:
            raise CheckpointError(
                f"not a full checkpoint: no {', '.join(repr(k) for k in missing)}", where=where
            )
    if strict:
        check_fits(model.state_dict(), state["model"], where)
    model.load_state_dict(state["model"], strict=strict)
    if optimizer is not None and "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(state["scheduler"])
    if restore_rng and "rng" in state:
        set_rng_state(state["rng"])
    samples = state.get("samples")
    step = state.get("step")
    return Applied(
        data_position(state),
        state.get("metadata") or {},
        None if samples is None else int(samples),
        None if step is None else int(step),
    )
