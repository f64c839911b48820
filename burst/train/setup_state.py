"""A ``TrainSetup``'s state in the one checkpoint state format (``burst.checkpoint.state``):
capture it, apply it, and read back the data position a restored state resumes from. Every
engine (plain torch, DDP, DeepSpeed) and the regional worker save and restore through these."""

from __future__ import annotations

from typing import Any

from burst.checkpoint.state import apply_state, capture_state, data_position
from burst.train.setup import TrainSetup


def capture_setup(
    setup: TrainSetup, step: int, tier: str, samples: int | None = None
) -> dict[str, Any]:
    """The state of ``setup`` at ``step`` in the one state format (``capture_state``): the
    data position of a full state is ``step``; ``samples``: samples consumed (several ranks:
    see TrainSetup)."""
    return capture_state(
        setup.model,
        setup.optimizer,
        setup.scheduler,
        tier=tier,
        step=step,
        data_position=step if tier == "full" else None,
        samples=samples if tier == "full" else None,
    )


def apply_setup(setup: TrainSetup, state: dict[str, Any], where: str = "checkpoint") -> int:
    """Load a full state into ``setup`` (``apply_state``); returns its data position."""
    applied = apply_state(
        state, setup.model, setup.optimizer, setup.scheduler, full=True, where=where
    )
    return int(applied.data_position)


def restored_samples(setup: TrainSetup, state: dict[str, Any], batch: int) -> int | None:
    """The data position in samples of a restored full state: as saved, or (a checkpoint of
    one rank reading a batch per step) steps x batch; None without ``batch_for_samples``."""
    if setup.batch_for_samples is None:
        return None
    if state.get("samples") is not None:
        return int(state["samples"])
    return int(data_position(state)) * batch
