"""A plain torchrun training script, written as for SkyPilot or dstack: nothing of burst in it.

    torchrun --nproc-per-node=2 examples/programs/torchrun_train.py --steps 40 --save-every 5

It trains a small MLP data-parallel (DDP; gloo on CPU, NCCL on GPUs), deterministically: the
batch of each step is a pure function of the step, so a run resumed from a checkpoint ends
with exactly the weights of an uninterrupted one. Rank 0 saves ``ckpt-<step>.pt`` with plain
``torch.save`` into ``$BURST_CHECKPOINT_DIR`` (or ``--out``); burst sees each file complete
(torch.save's zip archive is whole) and commits it. On a resume it loads
``$BURST_RESUME_FROM``. On ``$BURST_NOTICE_SIGNAL`` (SIGUSR1; a preemption notice) it saves at
the next step every rank agrees on and exits 0; each rank says whether the signal reached it
(``rank 1: notice signal SIGUSR1 received``).
"""

from __future__ import annotations

import argparse
import gc
import os
import signal
import time
from pathlib import Path
from types import FrameType

import torch
import torch.distributed as dist
from torch import nn

NOTICE = {"seen": False}


def on_notice(_signum: int, _frame: FrameType | None) -> None:
    NOTICE["seen"] = True


def batch(step: int, rank: int, world: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(size // world, 16, generator=g)
    y = x.sum(dim=1, keepdim=True).sin()
    return x, y


def leave() -> int:
    """Every rank done, then the process group destroyed. The caller drops its
    DistributedDataParallel first: DDP's reducer holds a reference to the process group, and
    were it the last one, freeing the reducer (when main returns) would run the gloo group's
    destructor with the GIL held, which joins gloo's worker threads while one of them waits
    for the GIL to free a finished collective's tensors: a deadlock at exit (torch 2.13, seen
    about once in a dozen runs under load). Dropped before destroy_process_group, the group's
    last reference is torch's own, released without the GIL."""
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--step-seconds", type=float, default=0.0, help="pace (demos and tests)")
    ap.add_argument("--out", default=os.environ.get("BURST_CHECKPOINT_DIR", "checkpoints"))
    args = ap.parse_args()

    signame = os.environ.get("BURST_NOTICE_SIGNAL", "SIGUSR1")
    signal.signal(signal.Signals[signame], on_notice)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    dist.init_process_group("gloo" if not torch.cuda.is_available() else "nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 1))
    ddp = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    start = 0
    resume = os.environ.get("BURST_RESUME_FROM")
    if resume:
        ckpt = torch.load(resume, weights_only=True)
        model.load_state_dict(ckpt["model"])
        opt.load_state_dict(ckpt["optimizer"])
        start = int(ckpt["step"])
        if rank == 0:
            print(f"resumed from {resume} at step {start}", flush=True)

    def save(step: int) -> None:
        if rank == 0:
            state = {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step}
            torch.save(state, out / f"ckpt-{step:06d}.pt")
            print(f"saved step {step}", flush=True)
        dist.barrier()

    step = start
    while step < args.steps:
        t0 = time.monotonic()
        x, y = batch(step, rank, world, args.batch_size)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        step += 1
        if rank == 0 and step % 5 == 0:
            print(f"step {step} loss {loss.item():.5f}", flush=True)
        # every rank stops at the same step: any rank's notice counts
        flag = torch.tensor([1.0 if NOTICE["seen"] else 0.0])
        dist.all_reduce(flag)
        if flag.item() > 0:
            save(step)
            if rank == 0:
                print(f"notice: saved step {step}, exiting", flush=True)
            got = "received" if NOTICE["seen"] else "not received (another rank's)"
            print(f"rank {rank}: notice signal {signame} {got}", flush=True)
            del ddp  # before leave(): see there
            return leave()
        if step % args.save_every == 0 or step == args.steps:
            save(step)
        left = args.step_seconds - (time.monotonic() - t0)
        if left > 0:
            time.sleep(left)
    del ddp  # before leave(): see there
    return leave()


if __name__ == "__main__":
    raise SystemExit(main())
