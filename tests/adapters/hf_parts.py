"""Hugging Face parts for test_hf.py (a tiny GPT-2 built from a config, a dataset, a callback
that sends the notice signal), kept out of the test module so that collecting the suite does
not import transformers (about 3 CPU-seconds in each test worker)."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import torch
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(i))
        return {"input_ids": ids, "labels": ids}


def trainer(out: Path, callbacks: list[Any]) -> Trainer:
    torch.manual_seed(0)
    cfg = GPT2Config(vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2)
    args = TrainingArguments(
        output_dir=str(out),
        max_steps=8,
        save_steps=3,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        seed=0,
        disable_tqdm=True,
        logging_steps=100,
    )
    return Trainer(
        model=GPT2LMHeadModel(cfg), args=args, train_dataset=Tokens(), callbacks=callbacks
    )


class SignalAt(TrainerCallback):
    """Sends this process the notice signal at the end of one step (a real signal)."""

    def __init__(self, step: int) -> None:
        self.step = step

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR1)
