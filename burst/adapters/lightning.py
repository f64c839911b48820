"""A Lightning callback: on a preemption notice, save a ``.ckpt`` now and stop.

    from burst.adapters.lightning import BurstCallback, checkpoint_dir, resume_ckpt_path

    periodic = ModelCheckpoint(dirpath=checkpoint_dir(), every_n_train_steps=50, save_top_k=-1,
                               save_last=True)
    trainer = L.Trainer(callbacks=[periodic, BurstCallback()], ...)
    trainer.fit(model, datamodule, ckpt_path=resume_ckpt_path())   # or ckpt_path="last"
    trainer.save_checkpoint("final.ckpt")  # never runs after a notice: fit() raised

At the end of the batch in progress after the notice signal (``BURST_NOTICE_SIGNAL``, SIGUSR1)
or the notice file, every rank agrees (``strategy.reduce_boolean_decision``), the callback
calls ``trainer.save_checkpoint`` (a collective: model, optimizers, schedulers, loops, RNG)
into ``<dir>/.step-<global_step>.ckpt.partial`` and renames it to ``step-<global_step>.ckpt``
(``<dir>``: ``dirpath``, else the first ``ModelCheckpoint``'s directory under
``$BURST_CHECKPOINT_DIR``, else that directory). For each ``ModelCheckpoint`` with
``save_last``, it also writes that save as its ``last.ckpt`` (a copy, or a link with
``save_last="link"``), which ``fit(ckpt_path="last")`` opens: an unchanged script resumes from
the notice's save. It then raises ``StoppedByNotice`` out of ``fit()``: the code after it does
not run, and the program exits 75 unless it catches it; burst, which commits the file, exits
75 to requeue. burst commits and restores the step's files together (the step file and
``last.ckpt``), so ``resume_ckpt_path()`` (``BURST_RESUME_FROM``) and ``ckpt_path="last"``
both open the restored step: Lightning resumes at that global step, and the callback tells
burst the step it resumed at.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

try:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
except ImportError:  # pragma: no cover - depends on the installed extras
    raise ImportError(
        "burst.adapters.lightning needs lightning: pip install 'burst-train[frameworks]'"
    ) from None

from burst.adapters.notice import (
    NoticeWatch,
    StoppedByNotice,
    checkpoint_dir,
    report_resumed,
    resume_from,
)

log = logging.getLogger(__name__)

__all__ = ["BurstCallback", "StoppedByNotice", "checkpoint_dir", "resume_ckpt_path"]


def resume_ckpt_path() -> str | None:
    """``Trainer.fit(ckpt_path=...)``: the ``.ckpt`` burst restored, or None on a fresh start."""
    path = resume_from("*.ckpt")
    return None if path is None else str(path)


def _under(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True


class BurstCallback(pl.Callback):
    """Save now and stop on a preemption notice (see the module's docstring).

    ``raise_on_notice=False`` returns from ``fit()`` (``trainer.should_stop``) instead of
    raising ``StoppedByNotice``; the script must then check ``stopped_by_notice`` itself."""

    def __init__(
        self,
        dirpath: str | Path | None = None,
        *,
        poll_s: float = 1.0,
        raise_on_notice: bool = True,
    ) -> None:
        self.dirpath = Path(dirpath) if dirpath is not None else None
        self.watch = NoticeWatch(poll_s=poll_s)
        self.raise_on_notice = raise_on_notice
        self.stopped_by_notice = False
        self.saved_path: Path | None = None

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch.install()

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.is_global_zero:  # Lightning has restored what it resumes from
            report_resumed(trainer.global_step, "lightning")

    def _folder(self, trainer: pl.Trainer) -> Path:
        if self.dirpath is not None:
            return self.dirpath
        root = checkpoint_dir()
        for cb in trainer.checkpoint_callbacks:
            dirpath = getattr(cb, "dirpath", None) if isinstance(cb, ModelCheckpoint) else None
            if dirpath is not None and _under(Path(dirpath), root):
                return Path(dirpath)
        return root

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
        folder = self._folder(trainer)
        name = f"step-{trainer.global_step}.ckpt"
        partial = folder / f".{name}.partial"
        trainer.save_checkpoint(str(partial))  # every rank takes part; rank 0 writes
        if trainer.is_global_zero:
            os.replace(partial, folder / name)
            self._write_last(trainer, folder / name)
        trainer.strategy.barrier("burst-notice-save")
        self.saved_path = folder / name
        log.info("preemption notice: saved %s and stopping", self.saved_path)
        self.watch.uninstall()
        if self.raise_on_notice:
            raise StoppedByNotice(trainer.global_step, self.saved_path)
        trainer.should_stop = True

    def _write_last(self, trainer: pl.Trainer, saved: Path) -> None:
        """The notice's save as each ModelCheckpoint's ``last`` (what ``ckpt_path="last"``
        opens), written under a temporary name and renamed into place."""
        import torch

        metrics = {
            **trainer.callback_metrics,
            "epoch": torch.tensor(trainer.current_epoch),
            "step": torch.tensor(trainer.global_step),
        }
        for cb in trainer.checkpoint_callbacks:
            if not isinstance(cb, ModelCheckpoint) or not cb.save_last or cb.dirpath is None:
                continue
            current = cb.last_model_path
            last = Path(current or cb.format_checkpoint_name(metrics, cb.CHECKPOINT_NAME_LAST))
            if last.resolve() == saved.resolve():
                continue
            tmp = last.with_name(f".{last.name}.partial")
            if tmp.is_symlink() or tmp.exists():
                tmp.unlink()
            if cb.save_last == "link":
                os.symlink(os.path.relpath(saved, last.parent), tmp)
            else:
                shutil.copyfile(saved, tmp)
            os.replace(tmp, last)
            cb.last_model_path = str(last)

    def on_exception(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, exception: BaseException
    ) -> None:
        self.watch.uninstall()

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.watch.uninstall()
