"""A Hugging Face Trainer fine-tune, as its user wrote it, plus burst's callback (2 lines).

    python examples/programs/hf_trainer.py --steps 30 --save-every 10

A tiny GPT-2 (2 layers, 64-token vocabulary) is built from a config, never downloaded, and
trained on synthetic token sequences (a pure function of the sample index) on CPU. Checkpoints
are the Trainer's own ``checkpoint-N`` folders in ``$BURST_CHECKPOINT_DIR`` (``output_dir()``);
burst commits each one once ``trainer_state.json`` is written. ``BurstCallback`` saves now and
stops on a preemption notice (``StoppedByNotice`` out of ``train()``: the code after it does not
run); a resumed attempt starts from ``$BURST_RESUME_FROM``
(``resume_from_checkpoint()``). ``--final-out FILE`` writes the last step and a hash of the final
weights (for tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
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

from burst.adapters.hf import (
    BurstCallback,
    StoppedByNotice,
    output_dir,
    resume_from_checkpoint,
)


class Tokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    """Synthetic sequences: each a pure function of its index."""

    def __init__(self, n: int, length: int, vocab: int) -> None:
        self.n, self.length, self.vocab = n, length, vocab

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        g = torch.Generator().manual_seed(i)
        ids = torch.randint(0, self.vocab, (self.length,), generator=g)
        return {"input_ids": ids, "labels": ids}


class Pace(TrainerCallback):
    """Sleeps after each step (demos and tests: a notice then lands mid-run)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def on_step_end(self, args: Any, state: Any, control: Any, **kw: Any) -> None:
        time.sleep(self.seconds)


def weights_sha256(model: torch.nn.Module) -> str:
    h = hashlib.sha256()
    for name, t in sorted(model.state_dict().items()):
        h.update(name.encode())
        h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--save-every", type=int, default=10)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--step-seconds", type=float, default=0.0, help="pace (demos and tests)")
    ap.add_argument("--final-out", type=Path, default=None)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = GPT2Config(vocab_size=64, n_positions=32, n_embd=64, n_layer=args.layers, n_head=2)
    model = GPT2LMHeadModel(config)
    training = TrainingArguments(
        output_dir=output_dir(),
        max_steps=args.steps,
        save_steps=args.save_every,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        seed=0,
        use_cpu=True,
        report_to=[],
        logging_steps=5,
        disable_tqdm=True,
    )
    burst_cb = BurstCallback(poll_s=0.2)
    callbacks: list[Any] = [burst_cb] + ([Pace(args.step_seconds)] if args.step_seconds else [])
    trainer = Trainer(
        model=model, args=training, train_dataset=Tokens(256, 32, 64), callbacks=callbacks
    )
    resume = resume_from_checkpoint()
    if resume:
        print(f"resuming from {resume}", flush=True)
    try:
        trainer.train(resume_from_checkpoint=resume)
    except StoppedByNotice as stop:  # saved on a preemption notice: not final, burst requeues
        print(f"notice: {stop}", flush=True)
        raise  # exit 75
    step = trainer.state.global_step
    print(f"done at step {step}", flush=True)
    if args.final_out is not None:
        doc = {"step": step, "weights_sha256": weights_sha256(model), "resumed_from": resume}
        args.final_out.write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
