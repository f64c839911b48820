"""burst.adapters.lightning with the real Lightning Trainer (a small module, synthetic data):
a real SIGUSR1 mid-run saves step-<global_step>.ckpt into BURST_CHECKPOINT_DIR and stops;
fit(ckpt_path=resume_ckpt_path()) continues from that global step to the end."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("lightning")
import lightning.pytorch as pl
import torch

from burst.adapters.lightning import BurstCallback, checkpoint_dir, resume_ckpt_path

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


class Regress(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


def data() -> torch.utils.data.DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    ds = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True).sin())
    return torch.utils.data.DataLoader(ds, batch_size=4, shuffle=False)


class SignalAt(pl.Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)


def fit(callbacks: list[Any], ckpt_path: str | None = None) -> tuple[pl.Trainer, Regress]:
    pl.seed_everything(0, verbose=False)
    model = Regress()
    trainer = pl.Trainer(
        max_steps=10,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
        deterministic=True,
    )
    trainer.fit(model, data(), ckpt_path=ckpt_path)
    return trainer, model


def test_notice_saves_a_ckpt_and_stops_then_resume_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "ckpt"
    out.mkdir()
    monkeypatch.setenv("BURST_CHECKPOINT_DIR", str(out))
    monkeypatch.delenv("BURST_RESUME_FROM", raising=False)
    assert checkpoint_dir() == out and resume_ckpt_path() is None
    cb = BurstCallback()
    first, _ = fit([SignalAt(4), cb])
    assert cb.stopped_by_notice and first.global_step == 4
    assert sorted(p.name for p in out.iterdir()) == ["step-4.ckpt"]  # no partial left
    ckpt = torch.load(out / "step-4.ckpt", weights_only=False)
    assert ckpt["global_step"] == 4 and "optimizer_states" in ckpt

    monkeypatch.setenv("BURST_RESUME_FROM", str(out / "step-4.ckpt"))
    counted = Count()
    resumed, _ = fit([BurstCallback(), counted], ckpt_path=resume_ckpt_path())
    # continued from the saved step: 6 more optimizer steps to max_steps, starting from the
    # saved weights. Lightning restores weights, optimizer, loops and the global step; a
    # plain (not stateful) DataLoader restarts its epoch, so the batches after the resume
    # are not those of an uninterrupted run (Lightning documents this): no equality here.
    assert resumed.global_step == 10 and counted.steps == [5, 6, 7, 8, 9, 10]
    assert counted.first_weights is not None
    assert torch.equal(counted.first_weights, ckpt["state_dict"]["net.0.weight"])


class Count(pl.Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.first_weights: torch.Tensor | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, *args: Any) -> None:
        if self.first_weights is None:
            self.first_weights = pl_module.net[0].weight.detach().clone()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.steps.append(trainer.global_step)
