"""A Lightning module, as its user wrote it, plus burst's callback (2 lines).

    python examples/programs/lightning_module.py --steps 30 --save-every 10

A small regression MLP on synthetic data (CPU). ``ModelCheckpoint`` saves ``step-N.ckpt`` every
``--save-every`` steps into ``$BURST_CHECKPOINT_DIR``; burst commits each file once whole.
``BurstCallback`` saves ``step-<global_step>.ckpt`` now and stops on a preemption notice
(``StoppedByNotice`` out of ``fit()``: the code after it does not run); a
resumed attempt passes ``resume_ckpt_path()`` (``$BURST_RESUME_FROM``) to ``fit``, and Lightning
continues at that global step. ``--final-out FILE`` writes the last step and a hash of the final
weights (for tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from burst.adapters.lightning import (
    BurstCallback,
    StoppedByNotice,
    checkpoint_dir,
    resume_ckpt_path,
)


class Regress(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(16, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)
        )

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=0.01)


class Pace(pl.Callback):
    """Sleeps after each batch (demos and tests: a notice then lands mid-run)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_train_batch_end(self, *args: Any) -> None:
        time.sleep(self.seconds)


def data() -> torch.utils.data.DataLoader[Any]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1024, 16, generator=g)
    ds = torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True).sin())
    return torch.utils.data.DataLoader(ds, batch_size=16, shuffle=False)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--step-seconds", type=float, default=0.0, help="pace (demos and tests)")
    ap.add_argument("--final-out", type=Path, default=None)
    args = ap.parse_args()

    torch.set_num_threads(1)
    pl.seed_everything(0, verbose=False)
    folder = checkpoint_dir()
    folder.mkdir(parents=True, exist_ok=True)
    periodic = ModelCheckpoint(
        dirpath=folder,
        filename="step-{step}",
        auto_insert_metric_name=False,
        every_n_train_steps=args.save_every,
        save_top_k=-1,
    )
    burst_cb = BurstCallback(poll_s=0.2)
    callbacks: list[Any] = [periodic, burst_cb]
    if args.step_seconds:
        callbacks.append(Pace(args.step_seconds))
    trainer = pl.Trainer(
        max_steps=args.steps,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        deterministic=True,
        callbacks=callbacks,
    )
    model = Regress()
    resume = resume_ckpt_path()
    if resume:
        print(f"resuming from {resume}", flush=True)
    try:
        trainer.fit(model, data(), ckpt_path=resume)
    except StoppedByNotice as stop:  # saved on a preemption notice: not final, burst requeues
        print(f"notice: {stop}", flush=True)
        raise  # exit 75
    print(f"done at step {trainer.global_step}", flush=True)
    if args.final_out is not None:
        h = hashlib.sha256()
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
        doc = {"step": trainer.global_step, "weights_sha256": h.hexdigest(), "resumed_from": resume}
        args.final_out.write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
