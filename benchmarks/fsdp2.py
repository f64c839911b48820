"""FSDP2 checkpoint benchmark: burst's per-rank save of an FSDP2 state against DCP ``async_save``.

    python benchmarks/fsdp2.py [--quick] [--reps N] [--worlds 2] [--out FILE]

For each world size W (torchrun ranks on CPU, gloo), a model of 12 square layers is sharded
with ``fully_shard`` and stepped once with AdamW (weights + two moments, 272 MiB in all, each
rank holding 1/W). Each repetition changes every byte (as a training step would), then saves
alternately with burst (what ``engine: fsdp2`` saves: ``local_parts`` of DCP's sharded state
dicts, through a ``CheckpointManager`` with a ``ShardInfo``: own buffer, own worker, rank 0's
worker commits the global manifest) and with ``torch.distributed.checkpoint.async_save``
(``FileSystemWriter``), both into directories on the same local disk. A and B alternated,
medians of --reps (at least 3); the first save of each is reported apart. Restore: into the
live model and optimizer, burst (what the engine does: ``restore_own``, each rank fetching
only its own shard straight into the live model's and optimizer's tensors, then DCP's
``set_*_state_dict``) against ``dcp.load`` (into the live state dicts) +
``set_*_state_dict``. Written to benchmarks/results/fsdp2.json (the slowest rank of each
measurement):

  stall_ratio_vs_dcp    training blocked per save, burst / DCP async_save   (goal <= 0.5)
  durable_ratio_vs_dcp  save call -> committed, burst / DCP                 (goal <= 1.0)
  restore_ratio_vs_dcp  restore, burst / DCP (the two alternate first)      (goal <= 1.0);
                        restore_reps_s: each repetition's; restore_cpu_s: each rank's
                        CPU-seconds (median), less sensitive to the load than wall time
  first_stall_ratio     burst's first save (a manager nobody warmed, right after its
                        construction) / its steady stall                    (goal <= 2.0)
  bytes_per_rank        what each rank of burst wrote in one save
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    ab_order,
    cpu_seconds,
    goals_text,
    machine_note,
    meets_goals,
    torchrun_ranks,
    write_results,
)

LAYERS = 12
WIDTHS = {"full": 1408, "quick": 1408, "smoke": 64}
GOALS = {
    "stall_ratio_vs_dcp": ("<=", 0.5),
    "durable_ratio_vs_dcp": ("<=", 1.0),
    "restore_ratio_vs_dcp": ("<=", 1.0),
    "first_stall_ratio": ("<=", 2.0),
}


def rank_main(args: argparse.Namespace) -> int:
    """One rank (under torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
        set_model_state_dict,
        set_optimizer_state_dict,
    )
    from torch.distributed.fsdp import fully_shard

    from burst.checkpoint import CheckpointManager
    from burst.checkpoint.catalog import list_checkpoints, load_manifest
    from burst.checkpoint.dtensor_parts import local_parts, own_shards, rank_parts
    from burst.checkpoint.own_restore import restore_own
    from burst.checkpoint.sharded import ShardInfo
    from burst.checkpoint.split_restore import Exchange
    from burst.storage import open_store
    from burst.train.fsdp_engine import live_part

    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    work = Path(args.work)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        *(torch.nn.Linear(args.width, args.width, bias=False) for _ in range(LAYERS))
    )
    fully_shard(model)
    optim = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, args.width)).sum().backward()
    optim.step()  # the moments exist
    optim.zero_grad(set_to_none=True)
    store = open_store(f"file://{work}/burst-{world}")
    mgr = CheckpointManager(store, shard=ShardInfo(rank, world, f"fsdp{world}"))

    def slowest(x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    def touch(step: int) -> None:  # every byte changes, as after an optimizer step
        with torch.no_grad():
            for p in model.parameters():
                p.to_local().add_(1e-3 * step)
            for s in optim.state.values():
                for k in ("exp_avg", "exp_avg_sq"):
                    s[k].to_local().add_(1e-3 * step)

    def burst_part(step: int) -> dict[str, Any]:
        part: dict[str, Any] = {
            "rank": rank,
            "model": local_parts(get_model_state_dict(model), "model"),
            "optimizer": local_parts(get_optimizer_state_dict(model, optim), "optimizer"),
        }
        if rank == 0:
            part["head"] = {"step": step, "tier": "full"}
        return {"fsdp2": part}

    def dcp_state() -> dict[str, Any]:
        return {
            "model": get_model_state_dict(model),
            "optim": get_optimizer_state_dict(model, optim),
        }

    rows: dict[str, list[float]] = {k: [] for k in ("b_stall", "b_durable", "d_stall", "d_durable")}
    first: dict[str, float] = {}
    ddir = work
    for rep in range(args.reps + 1):  # rep 0: the first save of each, reported apart
        step = rep + 1
        touch(step)
        dist.barrier()
        t0 = time.perf_counter()
        mgr.save(step, burst_part(step))
        stall = time.perf_counter() - t0
        mgr.wait()
        dist.barrier()
        b = (slowest(stall), slowest(time.perf_counter() - t0))
        ddir = work / f"dcp-{world}" / f"step-{step}"
        dist.barrier()
        t0 = time.perf_counter()
        fut = dcp.async_save(dcp_state(), storage_writer=dcp.FileSystemWriter(str(ddir)))
        stall = time.perf_counter() - t0
        fut.result()
        dist.barrier()
        d = (slowest(stall), slowest(time.perf_counter() - t0))
        if rep == 0:
            first = {"b_stall": b[0], "d_stall": d[0]}
            continue
        rows["b_stall"].append(b[0])
        rows["b_durable"].append(b[1])
        rows["d_stall"].append(d[0])
        rows["d_durable"].append(d[1])

    def broadcast(t: Any, src: int) -> None:
        dist.broadcast(t, src=src)

    def all_ok(flag: bool) -> bool:
        t = torch.tensor([1.0 if flag else 0.0])
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item() > 0.5)

    def decide(choose: Any) -> Any:
        box = [choose() if rank == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    exchange = Exchange(rank, world, broadcast, all_ok, decide)
    saved = model[3].weight.to_local().clone()
    walls: dict[str, list[float]] = {"burst": [], "dcp": []}
    cpus: dict[str, list[list[float]]] = {"burst": [], "dcp": []}

    def timed(side: str, run: Any) -> None:
        """``run()`` after a barrier: the slowest rank's wall time and each rank's
        CPU-seconds (this process, every thread: less sensitive to the load than wall)."""
        touch(1000)  # the live state differs from the checkpoint's
        dist.barrier()
        c0, t0 = cpu_seconds(), time.perf_counter()
        run()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        every = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(every, torch.tensor([wall, cpu], dtype=torch.float64))
        walls[side].append(max(float(t[0]) for t in every))
        cpus[side].append([float(t[1]) for t in every])
        assert torch.equal(model[3].weight.to_local(), saved)

    def burst_restore() -> None:
        restored = restore_own(
            store,
            mgr.checkpoints("full") if rank == 0 else [],
            exchange,
            "fsdp2",
            into=lambda: live_part(model, optim),
        )
        assert restored is not None
        parts = rank_parts(restored.state)
        assert parts is not None
        set_model_state_dict(
            model, own_shards([p["model"] for p in parts], get_model_state_dict(model), rank)
        )
        optim_like = get_optimizer_state_dict(model, optim)
        whole = own_shards([p["optimizer"] for p in parts], optim_like, rank)
        set_optimizer_state_dict(model, optim, whole)

    def dcp_restore() -> None:
        state = dcp_state()
        dcp.load(state, storage_reader=dcp.FileSystemReader(str(ddir)))
        set_model_state_dict(model, state["model"])
        set_optimizer_state_dict(model, optim, state["optim"])

    for rep in range(args.reps):
        for side in ab_order(rep):
            if side == "A":
                timed("burst", burst_restore)
            else:
                timed("dcp", dcp_restore)

    dist.barrier()
    if rank == 0:
        m = load_manifest(store, list_checkpoints(store)[-1])
        med = statistics.median

        def per_rank(reps: list[list[float]]) -> list[float]:
            return [round(med(r[i] for r in reps), 4) for i in range(world)]

        out: dict[str, Any] = {
            "world": world,
            "state_bytes": 3 * LAYERS * args.width * args.width * 4,
            "burst": {
                "stall_s": med(rows["b_stall"]),
                "durable_s": med(rows["b_durable"]),
                "restore_s": med(walls["burst"]),
                "first_stall_s": first["b_stall"],
                "restore_reps_s": walls["burst"],
                "restore_cpu_s": per_rank(cpus["burst"]),
            },
            "dcp_async_save": {
                "stall_s": med(rows["d_stall"]),
                "durable_s": med(rows["d_durable"]),
                "restore_s": med(walls["dcp"]),
                "first_stall_s": first["d_stall"],
                "restore_reps_s": walls["dcp"],
                "restore_cpu_s": per_rank(cpus["dcp"]),
            },
            "restore_load": [round(x, 2) for x in os.getloadavg()],
            "bytes_per_rank": [p["bytes"] for p in m.stats["ranks"]],
        }
        for k in ("stall", "durable", "restore"):
            out[f"{k}_ratio_vs_dcp"] = out["burst"][f"{k}_s"] / out["dcp_async_save"][f"{k}_s"]
        # a manager nobody warmed, saving right after its construction
        out["first_stall_ratio"] = out["burst"]["first_stall_s"] / out["burst"]["stall_s"]
        Path(args.result).write_text(json.dumps(out, indent=2))
    mgr.close()
    dist.destroy_process_group()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="3 repetitions (the numbers say so)")
    p.add_argument("--smoke", action="store_true", help="a tiny state: checks the harness only")
    p.add_argument("--reps", type=int, default=None)
    p.add_argument("--worlds", default="2,4")
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "fsdp2.json"))
    p.add_argument("--rank-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_run:
        return rank_main(args)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    reps = max(3, args.reps or (3 if mode != "full" else 5))
    results: dict[str, Any] = {
        "mode": mode,
        "reps": reps,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "store": "local directory (both); DCP FileSystemWriter, burst file:// chunk store",
        "goals": goals_text(GOALS),
        "worlds": {},
    }
    for world in (int(w) for w in args.worlds.split(",")):
        rank_args = ["--reps", str(reps), "--width", str(WIDTHS[mode])]
        row = torchrun_ranks(__file__, world, rank_args, prefix="fsdp2-bench-")
        row["meets_goals"] = meets_goals(row, GOALS)
        results["worlds"][str(world)] = row
        print(json.dumps({k: row[k] for k in (*GOALS, "bytes_per_rank")}), flush=True)
    write_results(args.out, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
