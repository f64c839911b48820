"""What the resilient loop asks of a training engine (``training.engine`` in the spec).

The loop (``burst.train.loop``) owns everything engine-neutral: the checkpoint schedule, the
attempt records, the preemption notice board and the emergency-save decision, the budget
guard, metrics. An engine runs one optimizer step, saves and restores its state through the
run's ``RunCheckpoints`` store, and says how big its state is. ``TorchEngine`` is plain torch
(full and weights-only tiers); ``burst.train.deepspeed_engine.DeepSpeedEngine`` trains through
a DeepSpeed engine (one tier: full).
"""

from __future__ import annotations

from typing import Any, Protocol

from burst.checkpoint.state import rng_state, set_rng_state
from burst.spec import BurstJob
from burst.train.checkpoints import RunCheckpoints, state_nbytes
from burst.train.setup import TrainSetup
from burst.train.weights import weights_sha256


class TrainEngine(Protocol):
    name: str
    tiers: tuple[str, ...]  # checkpoint tiers it can save: "full" first

    def step(self, step: int) -> float:
        """One optimizer step on the batch of global step ``step``; returns the loss."""

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        """Hand a checkpoint of ``tier`` to the store; returns the seconds training blocked."""

    def restore(self, store: RunCheckpoints) -> int | None:
        """Resume from the newest full checkpoint that restores: its data position, or None
        when the store holds none."""

    def nbytes(self, tier: str) -> int:
        """Bytes a checkpoint of ``tier`` would be now (for the emergency decision)."""

    def weights_sha256(self) -> str: ...

    def close(self) -> None: ...


def capture_state(setup: TrainSetup, step: int, tier: str) -> dict[str, Any]:
    state: dict[str, Any] = {"step": step, "tier": tier, "model": setup.model.state_dict()}
    if tier == "full":
        state.update(
            optimizer=setup.optimizer.state_dict(),
            scheduler=setup.scheduler.state_dict() if setup.scheduler else None,
            rng=rng_state(),  # CUDA included: a GPU resume restores, never re-seeds
            data_position=step,
        )
    return state


def apply_state(setup: TrainSetup, state: dict[str, Any]) -> int:
    setup.model.load_state_dict(state["model"])
    setup.optimizer.load_state_dict(state["optimizer"])
    if setup.scheduler is not None and state.get("scheduler") is not None:
        setup.scheduler.load_state_dict(state["scheduler"])
    set_rng_state(state["rng"])
    return int(state["data_position"])


class TorchEngine:
    """Plain torch: the entrypoint's model, optimizer and scheduler as they are."""

    name = "torch"
    tiers: tuple[str, ...] = ("full", "weights")

    def __init__(self, setup: TrainSetup) -> None:
        self.setup = setup

    def step(self, step: int) -> float:
        setup = self.setup
        setup.model.train()
        x, y = setup.batch_for_step(step)
        setup.optimizer.zero_grad(set_to_none=True)
        out = setup.loss_fn(setup.model(x), y)
        out.backward()
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        return float(out.detach())

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        return store.save(step, capture_state(self.setup, step, tier), tier)

    def restore(self, store: RunCheckpoints) -> int | None:
        restored = store.restore_full()
        return None if restored is None else apply_state(self.setup, restored[1])

    def nbytes(self, tier: str) -> int:
        if tier == "weights":
            return state_nbytes(self.setup.model.state_dict())
        return state_nbytes(capture_state(self.setup, 0, tier))

    def weights_sha256(self) -> str:
        return weights_sha256(self.setup.model)

    def close(self) -> None:
        return None


def open_engine(job: BurstJob, setup: TrainSetup, work_dir: Any) -> TrainEngine:
    """The engine ``training.engine`` names, around what the entrypoint built."""
    if job.training.engine == "deepspeed":
        from burst.train.deepspeed_engine import DeepSpeedEngine

        return DeepSpeedEngine(job, setup, work_dir)
    return TorchEngine(setup)
