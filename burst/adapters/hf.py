"""A Hugging Face ``Trainer`` callback: on a preemption notice, save now and stop.

    from burst.adapters.hf import BurstCallback, output_dir, resume_from_checkpoint

    args = TrainingArguments(output_dir=output_dir(), save_steps=50, ...)
    trainer = Trainer(model, args, train_dataset=..., callbacks=[BurstCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())

``output_dir()`` is ``BURST_CHECKPOINT_DIR``: every ``checkpoint-N`` folder the Trainer saves
there (its periodic saves and the one on a notice) is committed by burst once complete
(``trainer_state.json`` written last). On the notice signal (``BURST_NOTICE_SIGNAL``, SIGUSR1)
or the notice file, the callback sets ``control.should_save`` and
``control.should_training_stop`` at the end of the step in progress: the Trainer saves
``checkpoint-<global_step>`` and returns from ``train()``; the program then exits 0 and burst,
which has seen the new checkpoint commit, exits 75 to requeue. On the resumed attempt
``resume_from_checkpoint()`` is the folder burst restored (``BURST_RESUME_FROM``): the Trainer
reloads model, optimizer, scheduler, RNG states and its position in the data.

With several processes (torchrun, DDP) the notice may reach some ranks before others: the
decision is shared with an all-reduce at each step end, so every rank saves the same step.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

try:
    from transformers import TrainerCallback, TrainerControl, TrainerState, TrainingArguments
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "burst.adapters.hf needs transformers: pip install 'burst-train[frameworks]'"
    ) from None

from burst.adapters.notice import NoticeWatch, checkpoint_dir, resume_from

log = logging.getLogger(__name__)


def output_dir(default: str | Path = "checkpoints") -> str:
    """``TrainingArguments.output_dir``: burst's checkpoint directory."""
    return str(checkpoint_dir(default))


def resume_from_checkpoint() -> str | None:
    """``Trainer.train(resume_from_checkpoint=...)``: the ``checkpoint-N`` folder burst
    restored for this attempt, or None on a fresh start."""
    path = resume_from("checkpoint-*")
    return None if path is None else str(path)


def _any_rank(flag: bool) -> bool:
    """True if ``flag`` is true on any rank (every rank must call this together)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover
        return flag
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    t = torch.tensor([1 if flag else 0], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return bool(t.item())


class BurstCallback(TrainerCallback):
    """Save now and stop on a preemption notice (see the module's docstring).

    ``stopped_by_notice`` says afterwards whether training stopped for a notice and
    ``saved_step`` which step it saved then."""

    def __init__(self, *, poll_s: float = 1.0) -> None:
        self.watch = NoticeWatch(poll_s=poll_s)
        self.stopped_by_notice = False
        self.saved_step: int | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.watch.install()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> TrainerControl:
        if self.stopped_by_notice or not _any_rank(self.watch.arrived()):
            return control
        self.stopped_by_notice = True
        self.saved_step = state.global_step
        control.should_save = True
        control.should_training_stop = True
        log.info(
            "preemption notice: saving checkpoint-%d into %s and stopping",
            state.global_step,
            args.output_dir,
        )
        return control

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.watch.uninstall()
