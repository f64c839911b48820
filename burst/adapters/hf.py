"""A Hugging Face ``Trainer`` callback: on a preemption notice, save now and stop.

    from burst.adapters.hf import BurstCallback, StoppedByNotice, output_dir, resume_from_checkpoint

    args = TrainingArguments(output_dir=output_dir(), save_steps=50, ...)
    trainer = Trainer(model, args, train_dataset=..., callbacks=[BurstCallback()])
    trainer.train(resume_from_checkpoint=resume_from_checkpoint())
    trainer.save_model()  # never runs after a notice: train() raised StoppedByNotice

``output_dir()`` is ``BURST_CHECKPOINT_DIR``: every ``checkpoint-N`` folder the Trainer saves
there (its periodic saves and the one on a notice) is committed by burst once complete
(``trainer_state.json`` written last), and what the script writes there after training
(``trainer.save_model()``) is committed with the last one when the program ends. On the notice
signal (``BURST_NOTICE_SIGNAL``, SIGUSR1) or the notice file, the callback sets
``control.should_save`` and ``control.should_training_stop`` at the end of the step in
progress: the Trainer saves ``checkpoint-<global_step>``, and once it has (``on_save``) the
callback raises ``StoppedByNotice`` out of ``train()``: the code after it does not run, and
the program exits 75 unless it catches it. burst, which commits that checkpoint, exits 75 to
requeue. On the resumed attempt ``resume_from_checkpoint()`` is the folder burst restored
(``BURST_RESUME_FROM``; ``resume_from_checkpoint=True`` finds the same one, the Trainer's
newest ``checkpoint-N``): the Trainer reloads model, optimizer, scheduler, RNG states and its
position in the data, and the callback tells burst the step it resumed at.

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

from burst.adapters.notice import (
    NoticeWatch,
    StoppedByNotice,
    checkpoint_dir,
    report_resumed,
    resume_from,
)

log = logging.getLogger(__name__)

__all__ = ["BurstCallback", "StoppedByNotice", "output_dir", "resume_from_checkpoint"]


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

    ``stopped_by_notice`` says whether training stopped for a notice and ``saved_step`` which
    step it saved then; ``raise_on_notice=False`` returns from ``train()`` instead of raising
    ``StoppedByNotice`` (the script must then check ``stopped_by_notice`` itself)."""

    def __init__(self, *, poll_s: float = 1.0, raise_on_notice: bool = True) -> None:
        self.watch = NoticeWatch(poll_s=poll_s)
        self.raise_on_notice = raise_on_notice
        self.stopped_by_notice = False
        self.saved_step: int | None = None

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.watch.install()
        if state.is_world_process_zero:  # the Trainer has loaded what it resumes from
            report_resumed(state.global_step, "hf")

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

    def on_save(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        if self.stopped_by_notice:  # the checkpoint of the notice is written: stop here
            self._stop(args)

    def on_train_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kw: Any
    ) -> None:
        self.watch.uninstall()
        if self.stopped_by_notice:  # (on_save raised already unless the save was skipped)
            self._stop(args)

    def _stop(self, args: TrainingArguments) -> None:
        self.watch.uninstall()
        if not self.raise_on_notice:
            return
        step = self.saved_step if self.saved_step is not None else 0
        raise StoppedByNotice(step, Path(str(args.output_dir)) / f"checkpoint-{step}")
