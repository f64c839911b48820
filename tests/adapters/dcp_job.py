"""A DCP program for the adapter tests: every rank saves the same deterministic state (a
DTensor sharded over the ranks, a replicated tensor, a Python object) through
BurstStorageWriter, then loads it back through BurstStorageReader into a zeroed state; rank 0
writes what it loaded to --result. Run alone or under torchrun (gloo)."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from burst.adapters.dcp_storage import BurstStorageReader, BurstStorageWriter


def values(step: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1000 + step)
    return {"w": torch.randn(64, 48, generator=g), "b": torch.randn(48, generator=g)}


def state(step: int, world: int, zero: bool = False) -> dict[str, Any]:
    v = values(step)
    if zero:
        v = {k: torch.zeros_like(t) for k, t in v.items()}
    w: torch.Tensor = v["w"]
    if world > 1:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Shard, distribute_tensor

        mesh = init_device_mesh("cpu", (world,))
        w = distribute_tensor(w, mesh, [Shard(0)])
    return {"model": {"w": w, "b": v["b"]}, "extra": {"step": 0 if zero else step}}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--steps", default="1,2")
    ap.add_argument("--result", required=True)
    args = ap.parse_args()
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1:
        dist.init_process_group("gloo")
    writer = BurstStorageWriter(args.store)
    steps = [int(s) for s in args.steps.split(",")]
    uploaded = []
    for step in steps:
        dcp.save(state(step, world), storage_writer=writer, checkpoint_id=str(step))
        if writer.last_manifest is not None:
            uploaded.append(writer.last_manifest.stats["uploaded_bytes"])
    loaded = state(0, world, zero=True)
    dcp.load(loaded, storage_reader=BurstStorageReader(args.store))
    w = loaded["model"]["w"]
    full = w.full_tensor() if hasattr(w, "full_tensor") else w
    if int(os.environ.get("RANK", "0")) == 0:
        want = values(steps[-1])
        doc = {
            "world": world,
            "step": loaded["extra"]["step"],
            "w_equal": bool(torch.equal(full, want["w"])),
            "b_equal": bool(torch.equal(loaded["model"]["b"], want["b"])),
            "uploaded": uploaded,
        }
        with open(args.result, "w") as fh:
            json.dump(doc, fh)
    writer.close()
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
