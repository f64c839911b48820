"""The training loop: deterministic, checkpointing on a schedule, resuming from the latest
full checkpoint with model, optimizer, scheduler, RNG states and data position."""

from __future__ import annotations

import logging
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch

from burst.spec import BurstJob
from burst.train.localckpt import LocalCheckpoints
from burst.train.setup import TrainSetup, load_entrypoint
from burst.train.weights import weights_sha256

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_STEPS = 10


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)
    torch.use_deterministic_algorithms(True)


def capture_state(setup: TrainSetup, step: int, tier: str) -> dict[str, Any]:
    state: dict[str, Any] = {"step": step, "tier": tier, "model": setup.model.state_dict()}
    if tier == "full":
        state.update(
            optimizer=setup.optimizer.state_dict(),
            scheduler=setup.scheduler.state_dict() if setup.scheduler else None,
            rng={"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                 "python": random.getstate()},
            data_position=step,
        )
    return state


def apply_state(setup: TrainSetup, state: dict[str, Any]) -> int:
    setup.model.load_state_dict(state["model"])
    setup.optimizer.load_state_dict(state["optimizer"])
    if setup.scheduler is not None and state.get("scheduler") is not None:
        setup.scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return int(state["data_position"])


def store_dir(job: BurstJob, run_id: str) -> Path:
    uri = job.storage.checkpoint_uri
    if not uri.startswith("file://"):
        from burst.errors import BadInputError

        raise BadInputError(f"storage.checkpoint_uri {uri!r}: the local train step needs file://")
    return Path(uri.removeprefix("file://")).resolve() / run_id


def train(job: BurstJob, run_id: str) -> dict[str, Any]:
    seed_everything(job.training.seed)
    setup = load_entrypoint(job)(job)
    ckpts = LocalCheckpoints(store_dir(job, run_id))
    start = 0
    resume = ckpts.latest(tier="full")
    if resume is not None:
        start = apply_state(setup, ckpts.load(resume))
        log.info("resumed from the checkpoint at step %d", start)
    policy = job.training.checkpoint
    interval = policy.interval_steps if isinstance(policy.interval_steps, int) else (
        DEFAULT_INTERVAL_STEPS)
    total = job.training.steps
    saved = len(ckpts.committed())
    loss = float("nan")
    for step in range(start, total):
        setup.model.train()
        x, y = setup.batch_for_step(step)
        setup.optimizer.zero_grad(set_to_none=True)
        out = setup.loss_fn(setup.model(x), y)
        out.backward()
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        loss = float(out.detach())
        done = step + 1
        if done % interval == 0 or done == total:
            saved += 1
            tier = "full" if saved % policy.full_every == 0 or done == total else "weights"
            ckpts.save(done, capture_state(setup, done, tier), tier)
            log.info("step %d loss %.5f: %s checkpoint committed", done, loss, tier)
    return {
        "final_step": total,
        "resumed_from": start,
        "final_loss": loss,
        "checkpoints": len(ckpts.committed()),
        "final_weights_sha256": weights_sha256(setup.model),
        "checkpoint_store": str(ckpts.root),
    }
