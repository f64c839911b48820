"""What the resilient loop asks of a training engine (``training.engine`` in the spec).

The loop (``burst.train.loop``) owns everything engine-neutral: the checkpoint schedule, the
attempt records, the preemption notice board and the emergency-save decision, the budget
guard, metrics. An engine runs one optimizer step, saves and restores its state through the
run's ``RunCheckpoints`` store, and says how big its state is. ``TorchEngine`` is plain torch
(full and weights-only tiers); ``burst.train.ddp_engine.DDPEngine`` is torch DDP over several
ranks, ``burst.train.fsdp_engine.FSDPEngine`` torch FSDP2 (``engine: fsdp2``);
``burst.train.deepspeed_engine.DeepSpeedEngine`` trains through a DeepSpeed engine (one tier:
full).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from burst.checkpoint.sharded import assemble
from burst.checkpoint.state import check_fits
from burst.errors import BadInputError
from burst.spec import BurstJob
from burst.train.checkpoints import RunCheckpoints, state_nbytes
from burst.train.setup import TrainSetup
from burst.train.setup_state import apply_setup, capture_setup, restored_samples
from burst.train.weights import weights_sha256

if TYPE_CHECKING:
    from burst.train.ranks import Ranks


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


class TorchEngine:
    """Plain torch: the entrypoint's model, optimizer and scheduler as they are."""

    name = "torch"
    tiers: tuple[str, ...] = ("full", "weights")

    def __init__(self, setup: TrainSetup, batch: int = 1) -> None:
        self.setup = setup
        self.batch = batch
        # samples consumed, once a checkpoint saved by several ranks was resumed (the data
        # position then counts samples, not steps of one batch)
        self.samples: int | None = None

    def _batch(self, step: int) -> tuple[Any, Any]:
        if self.samples is None or self.setup.batch_for_samples is None:
            return self.setup.batch_for_step(step)
        x, y = self.setup.batch_for_samples(self.samples, self.batch)
        self.samples += self.batch
        return x, y

    def step(self, step: int) -> float:
        setup = self.setup
        setup.model.train()
        x, y = self._batch(step)
        setup.optimizer.zero_grad(set_to_none=True)
        out = setup.loss_fn(setup.model(x), y)
        out.backward()
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        return float(out.detach())

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        return store.save(step, capture_setup(self.setup, step, tier, self.samples), tier)

    def restore(self, store: RunCheckpoints) -> int | None:
        restored = store.restore_full()
        if restored is None:
            return None
        state = assemble(restored[1])  # saved by several ranks: the whole state
        where = f"checkpoint step {restored[0]} (full) in {store.mgr.store.url}"
        check_fits(self.setup.model.state_dict(), state.get("model"), where)
        if "samples" in state:
            self.samples = restored_samples(self.setup, state, self.batch)
        return apply_setup(self.setup, state, where)

    def nbytes(self, tier: str) -> int:
        if tier == "weights":
            return state_nbytes(self.setup.model.state_dict())
        return state_nbytes(capture_setup(self.setup, 0, tier))

    def weights_sha256(self) -> str:
        return weights_sha256(self.setup.model)

    def close(self) -> None:
        return None


def open_engine(
    job: BurstJob, setup: TrainSetup, work_dir: Any, ranks: Ranks | None = None
) -> TrainEngine:
    """The engine ``training.engine`` names, around what the entrypoint built. Each engine
    module is imported only when named: importing one loads torch's distributed stack (1 to
    2 s), which plain torch and a program's supervisor never need."""
    if job.training.engine == "deepspeed":
        from burst.train.deepspeed_engine import DeepSpeedEngine

        return DeepSpeedEngine(job, setup, work_dir, ranks)
    if job.training.engine == "fsdp2":
        from burst.train.fsdp_engine import FSDPEngine

        if ranks is None:
            raise BadInputError("engine fsdp2 needs at least 2 ranks (it runs under torchrun)")
        return FSDPEngine(job, setup, ranks)
    if ranks is not None and ranks.many:
        from burst.train.ddp_engine import DDPEngine

        return DDPEngine(job, setup, ranks)
    return TorchEngine(setup, job.training.batch_size)
