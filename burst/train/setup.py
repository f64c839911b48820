"""What a training entrypoint returns: everything the resilient loop needs, nothing more."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

from burst.errors import BadInputError, BurstError
from burst.inputs import clip
from burst.spec import BurstJob

if TYPE_CHECKING:  # (torch is imported by the entrypoint: a program's supervisor needs none)
    import torch

Batch: TypeAlias = "tuple[torch.Tensor, torch.Tensor]"


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
    """The function ``training.entrypoint`` names. A module that is missing, does not
    compile or raises on import is one line naming the field and the module (exit 2)."""
    entry = job.training.entrypoint
    module_name, _, func_name = entry.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise BadInputError(
            f"training.entrypoint {entry}: cannot import {module_name!r}: {clip(str(exc))}"
        ) from None
    except SyntaxError as exc:
        where = f"{exc.filename}:{exc.lineno}" if exc.filename else module_name
        raise BadInputError(
            f"training.entrypoint {entry}: module {module_name} does not compile "
            f"({where}: {clip(str(exc.msg))})"
        ) from None
    except Exception as exc:
        raise BadInputError(
            f"training.entrypoint {entry}: importing module {module_name} raised "
            f"{exc.__class__.__name__}: {clip(str(exc))}"
        ) from None
    fn: Any = getattr(module, func_name, None)
    if not callable(fn):
        raise BadInputError(
            f"training.entrypoint {entry}: module {module_name} has no function {func_name!r}"
        )
    return fn


def build_setup(job: BurstJob) -> TrainSetup:
    """Call the entrypoint; what it raises, or a result that is not a TrainSetup, is one
    line naming ``training.entrypoint`` (exit 2)."""
    fn = load_entrypoint(job)
    entry = job.training.entrypoint
    try:
        setup = fn(job)
    except BurstError:
        raise
    except Exception as exc:
        raise BadInputError(
            f"training.entrypoint {entry} raised {exc.__class__.__name__}: {clip(str(exc))}"
        ) from None
    if not isinstance(setup, TrainSetup):
        raise BadInputError(
            f"training.entrypoint {entry} returned a {type(setup).__name__}, not a TrainSetup"
        )
    return setup
