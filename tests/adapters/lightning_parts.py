"""Lightning parts for test_lightning.py (a small module, synthetic data, callbacks), kept out
of the test module so that collecting the suite does not import Lightning (about 5
CPU-seconds in each test worker): the test imports this module when it runs."""

from __future__ import annotations

import os
import signal
from typing import Any

import lightning.pytorch as pl
import torch


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


class Count(pl.Callback):
    def __init__(self) -> None:
        self.steps: list[int] = []
        self.first_weights: torch.Tensor | None = None

    def on_train_batch_start(self, trainer: pl.Trainer, pl_module: Any, *args: Any) -> None:
        if self.first_weights is None:
            self.first_weights = pl_module.net[0].weight.detach().clone()

    def on_train_batch_end(self, trainer: pl.Trainer, *args: Any) -> None:
        self.steps.append(trainer.global_step)
