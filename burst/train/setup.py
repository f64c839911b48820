"""What a training entrypoint returns: everything the resilient loop needs, nothing more."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from burst.errors import BadInputError
from burst.spec import BurstJob

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass
class TrainSetup:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler | None
    # The batch for a global step is a pure function of (seed, step): the data-loader
    # position is then just the step, and a resumed run reads exactly the same batches.
    batch_for_step: Callable[[int], Batch]
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    # Optional, needed for more than one rank: ``count`` samples from global sample position
    # ``start`` (a pure function of the seed and the position). Each rank then reads its own
    # slice of every global batch, and the data position (samples consumed) stays right when
    # a run resumes on another number of ranks.
    batch_for_samples: Callable[[int, int], Batch] | None = None


def load_entrypoint(job: BurstJob) -> Callable[[BurstJob], TrainSetup]:
    module_name, _, func_name = job.training.entrypoint.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadInputError(f"training.entrypoint: cannot import {module_name!r}: {exc}") from None
    fn: Any = getattr(module, func_name, None)
    if not callable(fn):
        raise BadInputError(f"training.entrypoint: {module_name} has no function {func_name!r}")
    return fn  # type: ignore[no-any-return]
