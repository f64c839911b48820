"""A Lightning callback: on a preemption notice, save a ``.ckpt`` into burst's checkpoint
directory now and stop.

    from burst.adapters.lightning import BurstCallback, checkpoint_dir, resume_ckpt_path

    trainer = L.Trainer(callbacks=[BurstCallback(),
                                   ModelCheckpoint(dirpath=checkpoint_dir(), every_n_train_steps=50,
                                                   save_top_k=-1)], ...)
    trainer.fit(model, datamodule, ckpt_path=resume_ckpt_path())

At the end of the batch in progress after the notice signal (``BURST_NOTICE_SIGNAL``, SIGUSR1)
or the notice file, every rank agrees (``strategy.reduce_boolean_decision``), the callback
calls ``trainer.save_checkpoint`` (a collective: model, optimizers, schedulers, loops, RNG)
into ``<dir>/.step-<global_step>.ckpt.partial`` and renames it to ``step-<global_step>.ckpt``,
and sets ``trainer.should_stop``: ``fit`` returns, the program exits 0, and burst, which has
committed the file, exits 75 to requeue. ``resume_ckpt_path()`` is the ``.ckpt`` burst restored
(``BURST_RESUME_FROM``), for ``fit(..., ckpt_path=...)``: Lightning resumes at that global step.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "burst.adapters.lightning needs lightning: pip install 'burst-train[frameworks]'"
    ) from None

from burst.adapters.notice import NoticeWatch, checkpoint_dir, resume_from

log = logging.getLogger(__name__)

__all__ = ["BurstCallback", "checkpoint_dir", "resume_ckpt_path"]


def resume_ckpt_path() -> str | None:
    """``Trainer.fit(ckpt_path=...)``: the ``.ckpt`` burst restored, or None on a fresh start."""
    path = resume_from("*.ckpt")
    return None if path is None else str(path)


class BurstCallback(pl.Callback):
    """Save now and stop on a preemption notice (see the module's docstring)."""

    def __init__(self, dirpath: str | Path | None = None, *, poll_s: float = 1.0) -> None:
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.watch = NoticeWatch(poll_s=poll_s)
        self.stopped_by_notice = False
        self.saved_path: Path | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch.install()

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.stopped_by_notice:
            return
        if not trainer.strategy.reduce_boolean_decision(self.watch.arrived(), all=False):
            return
        self.stopped_by_notice = True
        folder = self.dirpath or checkpoint_dir()
        name = f"step-{trainer.global_step}.ckpt"
        partial = folder / f".{name}.partial"
        trainer.save_checkpoint(str(partial))  # every rank takes part; rank 0 writes
        if trainer.is_global_zero:
            os.replace(partial, folder / name)
        trainer.strategy.barrier("burst-notice-save")
        self.saved_path = folder / name
        trainer.should_stop = True
        log.info("preemption notice: saved %s and stopping", self.saved_path)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch.uninstall()
