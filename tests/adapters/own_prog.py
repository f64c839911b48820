"""A user's own training program, as the resume tests of test_resume_layouts.py run it under
the real train step: a tiny model built from a config (no download), CPU, seeds fixed.

    python tests/adapters/own_prog.py hf|lightning|lightning-plain --steps 10 --save-every 5
        --gate 7 --after FILE

* ``hf``: a Hugging Face ``Trainer`` (2-layer GPT-2) with ``BurstCallback``, periodic
  ``checkpoint-N`` saves into ``$BURST_CHECKPOINT_DIR``, ``train(resume_from_checkpoint=
  resume_from_checkpoint())``, then ``trainer.save_model()`` (the final outputs);
* ``lightning``: a Lightning module, ``ModelCheckpoint(dirpath=$BURST_CHECKPOINT_DIR/ckpts,
  every_n_train_steps, save_top_k=-1, save_last=True)`` (a subdirectory) with
  ``BurstCallback``, ``fit(ckpt_path="last")`` as an unchanged script resumes;
* ``lightning-plain``: the same without any burst code at all.

On a fresh start the program stops at the end of step ``--gate`` until burst's notice has
arrived (its notice file; with the adapter also its signal), so the notice lands between two
periodic saves; it writes ``at-gate`` beside the checkpoint directory when it gets there.
Without the adapter it then stays there (it trains on, saving nothing) until burst stops it.
After ``train()`` / ``fit()`` returns, it writes ``--after``: the steps it trained (and so
the step it started from) and the final step; that code must not run after a notice.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import torch

torch.set_num_threads(1)
CKPT = Path(os.environ["BURST_CHECKPOINT_DIR"])
GATE_FILE = CKPT.parent / "at-gate"


def wait_for_notice(arrived: Any) -> None:
    GATE_FILE.write_text("")
    end = time.monotonic() + 300
    while not arrived():
        if time.monotonic() > end:
            raise SystemExit("no notice came")
        time.sleep(0.05)


def notice_file() -> bool:
    return Path(os.environ["BURST_NOTICE_FILE"]).exists()


def hf(args: argparse.Namespace) -> dict[str, Any]:
    from transformers import (
        GPT2Config,
        GPT2LMHeadModel,
        Trainer,
        TrainerCallback,
        TrainingArguments,
    )

    from burst.adapters.hf import BurstCallback, output_dir, resume_from_checkpoint

    class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
        def __len__(self) -> int:
            return 64

        def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
            ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
            return {"input_ids": ids, "labels": ids}

    steps: list[int] = []
    burst_cb = BurstCallback(poll_s=0.1)
    resume = resume_from_checkpoint()
    gate = args.gate

    class Gate(TrainerCallback):
        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            steps.append(state.global_step)
            if resume is None and state.global_step == gate:
                wait_for_notice(burst_cb.watch.arrived)

    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    targs = TrainingArguments(
        output_dir=output_dir(),
        max_steps=args.steps,
        save_steps=args.save_every,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        logging_steps=1000,
    )
    trainer = Trainer(
        model=GPT2LMHeadModel(cfg),
        args=targs,
        train_dataset=Tokens(),
        callbacks=[Gate(), burst_cb],
    )
    trainer.train(resume_from_checkpoint=resume)
    trainer.save_model()  # the final model, beside the checkpoints
    return {"steps": steps, "final": trainer.state.global_step, "resumed_from": resume}


def lightning(args: argparse.Namespace, adapter: bool) -> dict[str, Any]:
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint

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

    steps: list[int] = []
    callbacks: list[Any] = []
    arrived = notice_file
    if adapter:
        from burst.adapters.lightning import BurstCallback

        burst_cb = BurstCallback(poll_s=0.1)
        arrived = burst_cb.watch.arrived
    fresh = not any(CKPT.rglob("*.ckpt"))

    class Gate(pl.Callback):
        def on_train_batch_end(self, trainer: pl.Trainer, *a: Any) -> None:
            steps.append(trainer.global_step)
            if fresh and trainer.global_step == args.gate:
                wait_for_notice(arrived)
                if not adapter:  # it trains on, saving nothing, until burst stops it
                    time.sleep(600)

    callbacks.append(Gate())
    if adapter:
        callbacks.append(burst_cb)
    callbacks.append(
        ModelCheckpoint(
            dirpath=CKPT / "ckpts",
            every_n_train_steps=args.save_every,
            save_top_k=-1,
            save_last=True,
        )
    )
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 8, generator=g)
    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(x, x.sum(dim=1, keepdim=True).sin()), batch_size=4
    )
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
    trainer.fit(Regress(), data, ckpt_path="last")
    return {"steps": steps, "final": trainer.global_step}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["hf", "lightning", "lightning-plain"])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--gate", type=int, default=7)
    ap.add_argument("--after", type=Path, required=True)
    args = ap.parse_args()
    done = hf(args) if args.mode == "hf" else lightning(args, adapter=args.mode == "lightning")
    args.after.write_text(json.dumps(done))  # must not run after a notice
    print(f"trained steps {done['steps'][0]}..{done['final']}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
