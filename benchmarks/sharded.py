"""Sharded checkpoint benchmark: burst's per-rank sharded save against DCP ``async_save``.

    python benchmarks/sharded.py [--quick] [--reps N] [--worlds 2,4] [--out FILE]

For each world size W (torchrun ranks on CPU, gloo), every rank holds the same replicated
state (DDP: 12 square layers, weights + Adam's two moments; >= 256 MiB in all), and saves it
alternately with burst (``CheckpointManager`` with a ``ShardInfo``: each rank stages and
uploads its part, rank 0's worker commits the global manifest) and with
``torch.distributed.checkpoint.async_save`` (``FileSystemWriter``; its default planner
writes each replicated tensor once), both into directories on the same local disk. A and B
alternated, medians of --reps (at least 3). Written to benchmarks/results/sharded.json:

  stall_ratio_vs_dcp    time the loop is blocked per save (the slowest rank), burst / DCP (<= 0.5)
  durable_ratio_vs_dcp  save call -> committed (rank 0), burst / DCP                 (<= 1.0)
  restore_ratio_vs_dcp  restore into a fresh model's tensors (allocated before the clock
                        starts, for both; the slowest rank; the two sides alternate
                        first), burst / DCP                                          (<= 1.0);
                        restore_reps_s: each repetition's; restore_cpu_s: each rank's
                        CPU-seconds (median), less sensitive to the load than wall time;
                        burst: every rank reads every chunk at once, in place, and
                        verifies 1/W of them (burst.checkpoint.split_restore);
                        burst.restore_shared_s: each rank reads 1/W and broadcasts it
                        over gloo (share=True); burst.restore_fresh_memory_s: no
                        tensors given, burst allocates (and faults in) its own
  incremental_bytes_ratio_vs_dcp  2nd save after 2 of 12 layers changed, bytes written,
                        burst / DCP                                                  (<= 0.3)
  first_stall_ratio     burst's first save (a manager nobody warmed, right after its
                        construction: buffer and worker started then) / its steady stall
                                                                                     (<= 2.0)
  bytes_per_rank        what each rank of burst wrote in the first save
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
WIDTHS = {"full": 1408, "quick": 1408, "smoke": 64}  # 272 MiB of state; tiny
GOALS = {
    "stall_ratio_vs_dcp": ("<=", 0.5),
    "durable_ratio_vs_dcp": ("<=", 1.0),
    "restore_ratio_vs_dcp": ("<=", 1.0),
    "first_stall_ratio": ("<=", 2.0),
    "incremental_bytes_ratio_vs_dcp": ("<=", 0.3),
}


def make_state(width: int, seed: int) -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(seed)
    state: dict[str, Any] = {"model": {}, "optim": {}}
    for i in range(LAYERS):
        state["model"][f"layer{i}.weight"] = torch.randn(width, width, generator=g)
        state["optim"][f"layer{i}.exp_avg"] = torch.randn(width, width, generator=g)
        state["optim"][f"layer{i}.exp_avg_sq"] = torch.rand(width, width, generator=g)
    return state


def change_two_layers(state: dict[str, Any], seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    for i in (0, 1):
        for group, name in (("model", "weight"), ("optim", "exp_avg"), ("optim", "exp_avg_sq")):
            t = state[group][f"layer{i}.{name}"]
            t.copy_(torch.randn(t.shape, generator=g))


def touch_all(state: dict[str, Any], step: int) -> None:
    for group in state.values():
        for t in group.values():
            t.add_(1e-3 * step)


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def rank_main(args: argparse.Namespace) -> int:
    """One rank (under torchrun)."""
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    from burst.checkpoint import CheckpointManager
    from burst.checkpoint.catalog import list_checkpoints, load_manifest
    from burst.checkpoint.sharded import ShardInfo, assemble, partition
    from burst.checkpoint.split_restore import Exchange
    from burst.storage import open_store

    dist.init_process_group("gloo", timeout=dt.timedelta(seconds=600))
    rank, world = dist.get_rank(), dist.get_world_size()
    work = Path(args.work)
    state = make_state(args.width, 0)
    store = open_store(f"file://{work}/burst-{world}")
    mgr = CheckpointManager(store, shard=ShardInfo(rank, world, f"bench{world}"))

    def slowest(x: float) -> float:
        t = torch.tensor([x], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        return float(t.item())

    rows: dict[str, list[float]] = {k: [] for k in ("b_stall", "b_durable", "d_stall", "d_durable")}
    first: dict[str, float] = {}
    for rep in range(args.reps + 1):  # rep 0 warms both up (buffers, workers, threads)
        step = rep + 1
        touch_all(state, step)  # as a training step would: every byte changes, no delta
        # A: burst
        dist.barrier()
        t0 = time.perf_counter()
        mgr.save(step, partition(state, rank, world))
        stall = time.perf_counter() - t0
        mgr.wait()
        dist.barrier()  # every rank's shard durable; rank 0's worker has committed
        durable = time.perf_counter() - t0
        b = (slowest(stall), slowest(durable))
        # B: DCP async_save
        ddir = work / f"dcp-{world}" / f"step-{step}"
        dist.barrier()
        t0 = time.perf_counter()
        fut = dcp.async_save(state, storage_writer=dcp.FileSystemWriter(str(ddir)))
        stall = time.perf_counter() - t0
        fut.result()
        dist.barrier()
        durable = time.perf_counter() - t0
        d = (slowest(stall), slowest(durable))
        if rep == 0:
            first = {"b_stall": b[0], "d_stall": d[0]}
            continue
        rows["b_stall"].append(b[0])
        rows["b_durable"].append(b[1])
        rows["d_stall"].append(d[0])
        rows["d_durable"].append(d[1])

    # restore into fresh tensors, the slowest rank; CPU-seconds of each rank beside it
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

    def timed(run: Any) -> tuple[Any, float, list[float]]:
        """``run()``, its wall time on the slowest rank, each rank's CPU-seconds (this
        process, every thread: less sensitive to the machine's load than wall time)."""
        dist.barrier()
        c0, t0 = cpu_seconds(), time.perf_counter()
        out = run()
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        every = [torch.zeros(2, dtype=torch.float64) for _ in range(world)]
        dist.all_gather(every, torch.tensor([wall, cpu], dtype=torch.float64))
        return out, max(float(t[0]) for t in every), [float(t[1]) for t in every]

    exchange = Exchange(rank, world, broadcast, all_ok, decide)
    want = state["model"]["layer3.weight"]
    names = ("burst", "dcp", "shared", "fresh_memory")
    walls: dict[str, list[float]] = {k: [] for k in names}
    cpus: dict[str, list[list[float]]] = {k: [] for k in names}

    def burst_side() -> None:
        # into a fresh model's tensors (made before the clock starts, as DCP's)
        fresh = make_state(args.width, 99)
        restored, wall, cpu = timed(lambda: mgr.restore_split(exchange, into=fresh))
        assert restored is not None
        whole = assemble(restored.state)
        got = whole["model"]["layer3.weight"]
        assert got.data_ptr() == fresh["model"]["layer3.weight"].data_ptr()  # in place
        assert torch.equal(got, want)
        walls["burst"].append(wall)
        cpus["burst"].append(cpu)

    def dcp_side() -> None:
        fresh = make_state(args.width, 99)
        reader = dcp.FileSystemReader(str(ddir))
        _, wall, cpu = timed(lambda: dcp.load(fresh, storage_reader=reader))
        assert torch.equal(fresh["model"]["layer3.weight"], want)
        walls["dcp"].append(wall)
        cpus["dcp"].append(cpu)

    def shared_side() -> None:
        # each rank reads 1/W and broadcasts it
        fresh = make_state(args.width, 99)
        restored, wall, cpu = timed(lambda: mgr.restore_split(exchange, share=True, into=fresh))
        assert restored is not None
        assert torch.equal(fresh["model"]["layer3.weight"], want)
        walls["shared"].append(wall)
        cpus["shared"].append(cpu)

    def fresh_memory_side() -> None:
        # no tensors to restore into: burst allocates its own
        restored, wall, cpu = timed(lambda: mgr.restore_split(exchange))
        assert restored is not None
        assert torch.equal(assemble(restored.state)["model"]["layer3.weight"], want)
        walls["fresh_memory"].append(wall)
        cpus["fresh_memory"].append(cpu)

    for rep in range(args.reps):
        for side in ab_order(rep):
            burst_side() if side == "A" else dcp_side()
        shared_side()
        fresh_memory_side()

    # incremental: 2 of 12 layers change
    last = list_checkpoints(store)[-1].step
    change_two_layers(state, 7)
    mgr.save(last + 1, partition(state, rank, world))
    mgr.wait()
    inc_dir = work / f"dcp-{world}" / "incremental"
    dcp.async_save(state, storage_writer=dcp.FileSystemWriter(str(inc_dir))).result()
    dist.barrier()
    if rank == 0:
        refs = list_checkpoints(store)
        first_m = load_manifest(store, refs[0])
        inc_m = load_manifest(store, refs[-1])
        med = statistics.median

        def per_rank(reps: list[list[float]]) -> list[float]:
            return [round(med(r[i] for r in reps), 4) for i in range(world)]

        out = {
            "world": world,
            "state_bytes": sum(t.numel() * 4 for g in state.values() for t in g.values()),
            "burst": {
                "stall_s": med(rows["b_stall"]),
                "durable_s": med(rows["b_durable"]),
                "restore_s": med(walls["burst"]),
                "restore_shared_s": med(walls["shared"]),
                "restore_fresh_memory_s": med(walls["fresh_memory"]),
                "first_stall_s": first["b_stall"],
                "restore_reps_s": walls["burst"],
                "restore_cpu_s": per_rank(cpus["burst"]),
                "restore_shared_cpu_s": per_rank(cpus["shared"]),
                "restore_fresh_memory_cpu_s": per_rank(cpus["fresh_memory"]),
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
            "bytes_per_rank": [p["bytes"] for p in first_m.stats["ranks"]],
            "incremental_bytes": {
                "burst": int(inc_m.stats["uploaded_bytes"]),
                "dcp": dir_bytes(inc_dir),
            },
        }
        out["stall_ratio_vs_dcp"] = out["burst"]["stall_s"] / out["dcp_async_save"]["stall_s"]
        out["durable_ratio_vs_dcp"] = out["burst"]["durable_s"] / out["dcp_async_save"]["durable_s"]
        out["restore_ratio_vs_dcp"] = out["burst"]["restore_s"] / out["dcp_async_save"]["restore_s"]
        # a manager nobody warmed, saving right after its construction
        out["first_stall_ratio"] = out["burst"]["first_stall_s"] / out["burst"]["stall_s"]
        out["incremental_bytes_ratio_vs_dcp"] = (
            out["incremental_bytes"]["burst"] / out["incremental_bytes"]["dcp"]
        )
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
    p.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "sharded.json"))
    p.add_argument("--rank-run", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--work", default=None, help=argparse.SUPPRESS)
    p.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank_run:
        return rank_main(args)
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    reps = max(3, args.reps or (3 if mode != "full" else 5))
    width = WIDTHS[mode]
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
        rank_args = ["--reps", str(reps), "--width", str(width)]
        row = torchrun_ranks(__file__, world, rank_args, prefix="sharded-bench-")
        row["meets_goals"] = meets_goals(row, GOALS)
        results["worlds"][str(world)] = row
        print(json.dumps({k: row[k] for k in (*GOALS, "bytes_per_rank")}), flush=True)
    write_results(args.out, results)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
