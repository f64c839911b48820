#!/usr/bin/env python3
"""A torch.distributed.checkpoint (DCP) training script, as written for torchtitan-style code:
nothing of burst in it unless ``--store`` is given.

    torchrun --nproc-per-node=2 examples/programs/dcp_two_ranks.py --steps 30 --save-every 5

A small MLP trained data-parallel (DDP; gloo on CPU), deterministically: each step's batch is a
pure function of the step and rank, so a resumed run ends with exactly the weights of an
uninterrupted one. Every ``--save-every`` steps all ranks save model and optimizer with
``dcp.save`` into ``$BURST_CHECKPOINT_DIR/step-<N>`` (DCP's own FileSystemWriter; burst commits
the folder once DCP has written ``.metadata``, its last file). A resume loads
``$BURST_RESUME_FROM`` with ``dcp.load``. On ``$BURST_NOTICE_SIGNAL`` (SIGUSR1) it saves at the
next step every rank agrees on and exits 0; each rank says whether the signal reached it
(``rank 1: notice signal SIGUSR1 received``).

``--store URL`` writes DCP straight into a burst store instead (``burst.adapters.dcp_storage``:
content-addressed chunks, manifest-last commit, no local copy) and resumes from its newest.
``--final-out FILE``: rank 0 writes the last step and a hash of the final weights (for tests).
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import signal
import time
from pathlib import Path
from types import FrameType
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

NOTICE = {"seen": False}


def on_notice(_signum: int, _frame: FrameType | None) -> None:
    NOTICE["seen"] = True


def batch(step: int, rank: int, world: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(size // world, 16, generator=g)
    return x, x.sum(dim=1, keepdim=True).sin()


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
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--save-every", type=int, default=5)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--step-seconds", type=float, default=0.0, help="pace (demos and tests)")
    ap.add_argument("--out", default=os.environ.get("BURST_CHECKPOINT_DIR", "checkpoints"))
    ap.add_argument("--store", default=None, help="a burst store URL: DCP straight into it")
    ap.add_argument("--final-out", type=Path, default=None)
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
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    writer: Any = None
    if args.store:
        from burst.adapters.dcp_storage import BurstStorageWriter

        writer = BurstStorageWriter(args.store)  # kept: the next save is a delta

    def state(step: int) -> dict[str, Any]:
        msd, osd = get_state_dict(model, opt)
        return {"model": msd, "optim": osd, "step": torch.tensor(step)}

    start = 0
    resume = os.environ.get("BURST_RESUME_FROM")
    loaded = state(0)
    if args.store:
        from burst.adapters.dcp_storage import BurstStorageReader, newest_dcp_step
        from burst.storage import open_store

        if newest_dcp_step(open_store(args.store)) is not None:
            dcp.load(loaded, storage_reader=BurstStorageReader(args.store))
            resume = args.store
    elif resume:
        dcp.load(loaded, checkpoint_id=resume)
    if resume:
        set_state_dict(
            model, opt, model_state_dict=loaded["model"], optim_state_dict=loaded["optim"]
        )
        start = int(loaded["step"])
        if rank == 0:
            print(f"resumed from {resume} at step {start}", flush=True)

    def save(step: int) -> None:
        if writer is not None:
            dcp.save(state(step), storage_writer=writer, checkpoint_id=str(step))
        else:
            dcp.save(state(step), checkpoint_id=str(out / f"step-{step:06d}"))
        if rank == 0:
            print(f"saved step {step}", flush=True)

    step = start
    while step < args.steps:
        t0 = time.monotonic()
        x, y = batch(step, rank, world, args.batch_size)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        step += 1
        flag = torch.tensor([1.0 if NOTICE["seen"] else 0.0])
        dist.all_reduce(flag)  # every rank stops at the same step: any rank's notice counts
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
    if rank == 0 and args.final_out is not None:
        h = hashlib.sha256()
        for name, t in sorted(model.state_dict().items()):
            h.update(name.encode())
            h.update(t.detach().contiguous().view(torch.uint8).numpy().tobytes())
        doc = {"step": step, "weights_sha256": h.hexdigest(), "resumed_from": resume}
        args.final_out.write_text(json.dumps(doc))
    del ddp  # before leave(): see there
    return leave()


if __name__ == "__main__":
    raise SystemExit(main())
