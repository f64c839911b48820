"""Hybrid cross-region training benchmark: burst's regional sync (DiLoCo, int8) against
synchronous data parallelism across the same regions, on a real corpus, CPU, gloo on loopback.

    python benchmarks/regional.py [--quick | --smoke] [--regions 2,4] [--local-steps 10,50,200]
                                  [--steps N] [--out FILE]

Corpus: the Python standard library's own ``.py`` files of the interpreter that runs this
(``sysconfig.get_paths()["stdlib"]``, ``site-packages`` and ``test`` folders left out). It is on
every machine that runs burst, needs no network, is real text written by many hands with
structure a language model can learn, and is large enough (tens of MB) for shards and a held-out
set; the Python version and a sha256 of the bytes used are recorded so a run can be replayed.
Files in sorted path order; every 10th file is held out for evaluation; the rest is cut into
contiguous blocks, one per region (regional data is not identically distributed: one region
gets ``asyncio``, another ``email``; that is the harder, realistic case).

Model: a byte-level causal transformer (vocab 256, 2 layers, width 64, 4 heads, context 64).
Every configuration has the same seeds: the same initial weights, and region r draws the same
batches from the same shard in the baseline and in burst. Total tokens are equal: every region
takes ``--steps`` AdamW steps of ``BATCH`` sequences in both.

* baseline S: one process per region (torch.multiprocessing, gloo on loopback), gradients
  all-reduced (averaged) every step. The all-reduce runs for real on loopback; its cross-region
  cost is charged through ``burst.regional.links.LinkEmulator`` under seed 002's
  cross-continent link for every pair of regions: a ring all-reduce, each region sending
  ``2 (N - 1)`` messages of ``M / N`` bytes to its neighbour in sequence (reduce-scatter, then
  all-gather), each message paying the link's latency. A step's wall time is seed 002's DP
  formula with the measured compute: ``max(t_fwd+bwd, t_allreduce) + t_update`` (the
  all-reduce overlapped with the backward pass: favourable to S).
* burst: the same processes, each an inner AdamW worker on its own shard; every H steps each
  worker builds its int8 pseudo-gradient with ``burst.regional.aggregate.make_message``; the
  first region hosts the aggregator (``aggregate_round``, DiLoCo's outer Nesterov lr 0.7,
  momentum 0.9), whose int8 update every worker applies (``apply_update``). The messages move
  between processes through gloo; their exact wire bytes are charged through the emulator
  (uploads in parallel, then downloads; the aggregator's own worker crosses nothing). A round's
  wall time is the slowest worker's measured compute for its H steps plus the emulated sync.
  A second burst arm, ``burst_outer_sgd``, is the same with the spec's ``outer: {optimizer:
  sgd, lr: 1.0, momentum: 0.0}``: the new global weights are the average of the regions' models
  (FedAvg), the outer setting the ablations (``--ablate``) single out as the cause of the loss
  gap at small H (docs/regional.md, "Benchmark").

The emulator does not sleep (``time_scale=0``): wall times are measured compute plus emulated
transfer time. Compute is each process's CPU time for the step (``time.thread_time``, one torch
thread per process), not its wall-clock time: the regions' processes share this machine's two
cores (with other work), and a region's GPUs would not wait for another region's; the same
measure in both arms. Written to benchmarks/results/regional.json, per region count and H:

  bytes_ratio      bytes that crossed regions, burst / S                       (goal <= 0.01)
  eval_loss_ratio  held-out loss at equal tokens, burst / S                    (goal <= 1.03)
  wall_ratio       emulated cross-continent wall time, burst / S               (goal <= 0.5)
  planner          burst.regional.estimates.plan_regional's bytes and sync time per round
                   against the measured ones (goal: within 20 %)
"""

from __future__ import annotations

import argparse
import datetime as dt
import hashlib
import json
import math
import os
import statistics
import sys
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import REPO, machine_note, write_results

SEED = 21
VOCAB = 256
WIDTH, LAYERS, HEADS, CONTEXT, BATCH = 64, 2, 4, 64, 16
INNER_LR = 2e-3
EVAL_SEQUENCES = 256
CORPUS_CAP = 24_000_000  # bytes of the corpus used at most (the stdlib is ~30 MB)
REGION_NAMES = ("ap-southeast-1", "me-central-1", "eu-central-1", "us-east-1")
MODES: dict[str, dict[str, Any]] = {
    "full": {"steps": 600, "local_steps": (10, 50, 200), "arms": ("burst", "burst_outer_sgd")},
    "quick": {"steps": 200, "local_steps": (10, 50, 200), "arms": ("burst", "burst_outer_sgd")},
    "smoke": {"steps": 8, "local_steps": (4,), "arms": ("burst",)},
}
# What an arm does beyond its H; ``--ablate`` varies these one at a time (docs/regional.md).
DEFAULT_VARIANT: dict[str, Any] = {
    "codec": "int8",  # int8 | none, both links
    "error_feedback": False,  # int8: carry the quantisation error (uplink and downlink)
    "outer_lr": 0.7,
    "outer_momentum": 0.9,
    "nesterov": True,
    "reset_inner": False,  # clear AdamW's moments at every sync
    "schedule": "constant",  # constant | cosine (linear warmup, cosine to 10 %): both arms
    "warmup": 0,
    "iid": False,  # every region samples the whole training set (both arms)
}
FEDAVG: dict[str, Any] = {"outer_lr": 1.0, "outer_momentum": 0.0, "nesterov": False}
# ``--ablate``: why burst's loss differs from S's, one change at a time against the defaults
# (2 regions, --quick's 200 steps unless --steps): (name, H or None for S, variant).
ABLATIONS: tuple[tuple[str, int | None, dict[str, Any]], ...] = (
    ("S", None, {}),
    ("default H=10", 10, {}),
    ("default H=50", 50, {}),
    ("default H=200", 200, {}),
    ("codec none H=10", 10, {"codec": "none"}),
    ("codec none H=50", 50, {"codec": "none"}),
    ("int8 error feedback H=10", 10, {"error_feedback": True}),
    ("int8 error feedback H=50", 50, {"error_feedback": True}),
    ("reset inner AdamW H=50", 50, {"reset_inner": True}),
    ("S iid", None, {"iid": True}),
    ("iid H=10", 10, {"iid": True}),
    ("iid H=50", 50, {"iid": True}),
    ("S cosine", None, {"schedule": "cosine", "warmup": 20}),
    ("cosine H=10", 10, {"schedule": "cosine", "warmup": 20}),
    ("cosine H=50", 50, {"schedule": "cosine", "warmup": 20}),
    ("outer sgd lr 1 mom 0 H=10", 10, FEDAVG),
    ("outer sgd lr 1 mom 0 H=50", 50, FEDAVG),
    ("outer sgd lr 1 mom 0 H=200", 200, FEDAVG),
    ("outer nesterov lr 0.7 mom 0.5 H=10", 10, {"outer_momentum": 0.5}),
    ("outer nesterov lr 0.35 mom 0.9 H=10", 10, {"outer_lr": 0.35}),
)
# The burst arms: the spec's defaults (DiLoCo's outer Nesterov lr 0.7, momentum 0.9), and the
# spec's `outer: {optimizer: sgd, lr: 1.0, momentum: 0.0}`: the average of the regions' models
# (FedAvg, McMahan et al. 2017), the outer setting the ablations single out (docs/regional.md).
ARMS: dict[str, dict[str, Any]] = {"burst": {}, "burst_outer_sgd": FEDAVG}
GOALS = {"bytes_ratio": 0.01, "eval_loss_ratio": 1.03, "wall_ratio": 0.5}
PLANNER_TOLERANCE = 0.2


# ---- corpus ---------------------------------------------------------------------------------


def corpus_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    skip = {"site-packages", "test", "tests", "idle_test", "__pycache__"}
    return sorted(p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts[:-1]))


def load_corpus(regions: int) -> tuple[list[bytes], bytes, dict[str, Any]]:
    """(one shard per region, held-out bytes, description)."""
    files = corpus_files()
    if not files:
        raise SystemExit("no standard-library source files found (sysconfig stdlib path)")
    digest = hashlib.sha256()
    texts: list[bytes] = []
    used = 0
    for p in files:
        data = p.read_bytes()
        if used + len(data) > CORPUS_CAP:
            break
        texts.append(data)
        digest.update(data)
        used += len(data)
    held = b"".join(t for i, t in enumerate(texts) if i % 10 == 0)
    train = [t for i, t in enumerate(texts) if i % 10 != 0]
    per = math.ceil(len(train) / regions)
    shards = [b"".join(train[r * per : (r + 1) * per]) for r in range(regions)]
    desc = {
        "source": "Python standard library .py files (sysconfig stdlib), sorted paths",
        "python": sys.version.split()[0],
        "files": len(texts),
        "bytes": used,
        "sha256": digest.hexdigest(),
        "held_out": "every 10th file",
        "held_out_bytes": len(held),
        "train_bytes": sum(len(s) for s in shards),
    }
    return shards, held, desc


# ---- model ----------------------------------------------------------------------------------


def build_model() -> Any:
    import torch
    from torch import nn

    class TinyLM(nn.Module):
        mask: torch.Tensor

        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(VOCAB, WIDTH)
            self.pos = nn.Embedding(CONTEXT, WIDTH)
            layer = nn.TransformerEncoderLayer(
                WIDTH, HEADS, 4 * WIDTH, dropout=0.0, batch_first=True, norm_first=True
            )
            self.blocks = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
            self.norm = nn.LayerNorm(WIDTH)
            self.head = nn.Linear(WIDTH, VOCAB)
            self.register_buffer(
                "mask", nn.Transformer.generate_square_subsequent_mask(CONTEXT), persistent=False
            )

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            h = self.tok(x) + self.pos(torch.arange(x.shape[1]))
            h = self.blocks(h, mask=self.mask[: x.shape[1], : x.shape[1]], is_causal=True)
            return self.head(self.norm(h))

    torch.manual_seed(SEED)
    return TinyLM()


def batch(data: Any, gen: Any, size: int) -> tuple[Any, Any]:
    import torch

    starts = torch.randint(0, len(data) - CONTEXT - 1, (size,), generator=gen)
    seq = torch.stack([data[s : s + CONTEXT + 1] for s in starts.tolist()]).long()
    return seq[:, :-1], seq[:, 1:]


def lm_loss(model: Any, x: Any, y: Any) -> Any:
    import torch.nn.functional as F

    logits = model(x)
    return F.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))


def eval_loss(model: Any, held: Any) -> float:
    import torch

    gen = torch.Generator().manual_seed(SEED + 999)
    x, y = batch(held, gen, EVAL_SEQUENCES)
    with torch.no_grad():
        return float(lm_loss(model, x, y))


# ---- one arm, one process per region -------------------------------------------------------


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent(parent: int) -> None:
    """End this process when ``parent`` ends (killed, interrupted or crashed), so no region's
    process outlives the benchmark. Linux: the kernel sends SIGKILL when the parent dies
    (prctl PR_SET_PDEATHSIG); elsewhere a daemon thread checks the parent's pid every second.
    A parent already gone before this runs (the race prctl leaves open) ends it at once."""
    import ctypes
    import ctypes.util
    import signal
    import threading

    armed = False
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        armed = libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) == 0
    if os.getppid() != parent:
        os._exit(1)
    if armed:
        return

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def worker(rank: int, cfg: dict[str, Any]) -> None:
    import torch
    import torch.distributed as dist

    die_with_parent(cfg["parent"])
    torch.set_num_threads(1)
    # A file rendezvous, not a TCP port picked in advance: another process (a parallel test)
    # can take a free port between the pick and the bind, and gloo then aborts the rank.
    dist.init_process_group(
        "gloo", init_method=f"file://{cfg['rendezvous']}", rank=rank, world_size=cfg["n"]
    )
    try:
        result = run_arm(rank, cfg)
        if rank == 0:
            Path(cfg["result"]).write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def run_arm(rank: int, cfg: dict[str, Any]) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from burst.plan.crossregion import SEED_002_LINKS
    from burst.regional.aggregate import aggregate_round, apply_update, make_message
    from burst.regional.compression import Codec
    from burst.regional.links import LinkEmulator
    from burst.regional.outer import NesterovOuterOptimizer, OuterSettings

    n, steps, h = cfg["n"], cfg["steps"], cfg["local_steps"]
    v = DEFAULT_VARIANT | cfg.get("variant", {})
    regions = list(REGION_NAMES[:n])
    shards, held_bytes, _ = load_corpus(n)
    own = b"".join(shards) if v["iid"] else shards[rank]
    data = torch.frombuffer(bytearray(own), dtype=torch.uint8)
    held = torch.frombuffer(bytearray(held_bytes), dtype=torch.uint8)
    model = build_model()
    opt = torch.optim.AdamW(model.parameters(), lr=INNER_LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_factor(v, steps))
    gen = torch.Generator().manual_seed(SEED * 1000 + rank)
    link = SEED_002_LINKS["cross_continent"]
    emu = LinkEmulator(
        {frozenset((a, b)): link for a in regions for b in regions if a != b}, time_scale=0.0
    )
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    wall = 0.0
    compute = 0.0
    syncs: list[float] = []
    wire: list[int] = []
    codec = Codec(v["codec"], error_feedback=v["error_feedback"])
    downlink = Codec(v["codec"], error_feedback=v["error_feedback"])
    outer = NesterovOuterOptimizer(
        OuterSettings(lr=v["outer_lr"], momentum=v["outer_momentum"], nesterov=v["nesterov"])
    )
    global_params = {k: v.detach().clone() for k, v in model.named_parameters()}
    round_compute = 0.0
    round_steps = 0
    rnd = 0
    for step in range(1, steps + 1):
        x, y = batch(data, gen, BATCH)
        t0 = time.thread_time()
        opt.zero_grad(set_to_none=True)
        loss = lm_loss(model, x, y)
        loss.backward()
        t_fb = time.thread_time() - t0
        if h is None:  # baseline S: all-reduce every step (real, on loopback)
            flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
            dist.all_reduce(flat)
            flat /= n
            off = 0
            for p in model.parameters():
                p.grad.copy_(flat[off : off + p.numel()].view_as(p))
                off += p.numel()
        t1 = time.thread_time()
        opt.step()
        sched.step()
        t_u = time.thread_time() - t1
        if h is None:
            times = torch.tensor([t_fb, t_u], dtype=torch.float64)
            dist.all_reduce(times, op=dist.ReduceOp.MAX)
            if rank == 0:
                # a ring all-reduce: 2 (N - 1) messages of M / N bytes in sequence from every
                # region to its neighbour (reduce-scatter, then all-gather), each paying the
                # link's latency; the regions send at once, the slowest one sets the time
                piece = math.ceil(grad_bytes / n)
                comm = max(
                    sum(
                        emu.transfer(regions[r], regions[(r + 1) % n], piece, "gradient").seconds
                        for _ in range(2 * (n - 1))
                    )
                    for r in range(n)
                )
                wall += max(float(times[0]), comm) + float(times[1])
                compute += float(times[0] + times[1])
                syncs.append(comm)
            continue
        round_compute += t_fb + t_u
        round_steps += 1
        if step % h and step != steps:
            continue
        # burst: a sync round
        local = {k: v.detach().clone() for k, v in model.named_parameters()}
        tokens = round_steps * BATCH * CONTEXT
        msg = make_message(regions[rank], rnd, tokens, global_params, local, codec)
        gathered: list[Any] = [None] * n if rank == 0 else []
        dist.gather_object(msg, gathered if rank == 0 else None, dst=0)
        slowest = torch.tensor([round_compute], dtype=torch.float64)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        box: list[Any] = [None]
        if rank == 0:
            res = aggregate_round(global_params, gathered, rnd, outer, downlink)
            up = [emu.transfer(m.region, regions[0], len(m.payload), "delta") for m in gathered]
            down = [emu.transfer(regions[0], r, len(res.update), "update") for r in regions]
            sync = max(r.seconds for r in up) + max(r.seconds for r in down)
            syncs.append(sync)
            wire.append(sum(r.nbytes for r in up + down if r.crosses))
            wall += float(slowest) + sync
            compute += float(slowest)
            box = [res.update]
        dist.broadcast_object_list(box, src=0)
        global_params = apply_update(global_params, box[0])
        with torch.no_grad():
            for k, p in model.named_parameters():
                p.copy_(global_params[k])
        if v["reset_inner"]:
            opt.state.clear()
        rnd += 1
        round_compute, round_steps = 0.0, 0
    out: dict[str, Any] = {}
    if rank == 0:
        out = {
            "eval_loss": eval_loss(model, held),
            "bytes_crossing": emu.bytes_crossing(),
            "egress_usd": emu.egress_usd(),
            "wall_s": wall,
            "compute_s": compute,
            "sync_s": sum(syncs),
            "tokens": n * steps * BATCH * CONTEXT,
            "param_count": sum(p.numel() for p in model.parameters()),
            "tensor_sizes": [p.numel() for p in model.parameters()],
            "grad_bytes": grad_bytes,
        }
        if h is not None:
            out |= {
                "rounds": rnd,
                "bytes_per_round": statistics.mean(wire),
                "sync_s_per_round": statistics.mean(syncs),
            }
        else:
            out["step_compute_s"] = compute / steps
    return out


def lr_factor(v: dict[str, Any], steps: int) -> Any:
    """The inner learning rate's factor at a step: 1, or DiLoCo's linear warmup then cosine
    decay (here to 10 % of the peak at the last step)."""

    def factor(step: int) -> float:
        if v["schedule"] == "constant":
            return 1.0
        if step < v["warmup"]:
            return (step + 1) / v["warmup"]
        done = (step - v["warmup"]) / max(1, steps - v["warmup"])
        return 0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, done)))

    return factor


def run(
    n: int, steps: int, local_steps: int | None, variant: dict[str, Any] | None = None
) -> dict[str, Any]:
    import torch.multiprocessing as mp

    with tempfile.TemporaryDirectory(prefix="regional-bench-") as tmp:
        result = Path(tmp) / "result.json"
        cfg: dict[str, Any] = {"n": n, "steps": steps, "local_steps": local_steps}
        cfg["variant"] = variant or {}
        cfg["parent"] = os.getpid()
        cfg |= {"rendezvous": str(Path(tmp) / "rendezvous"), "result": str(result)}
        mp.spawn(worker, args=(cfg,), nprocs=n, join=True)
        return dict(json.loads(result.read_text()))


def planner(
    n: int, steps: int, h: int, base: dict[str, Any], arm: dict[str, Any]
) -> dict[str, Any]:
    """The planner's prediction for this layout, with the compute profile measured in S."""
    from burst.plan.crossregion import SEED_002_LINKS, ModelProfile
    from burst.regional.estimates import plan_regional

    t_step = base["step_compute_s"]
    prof = ModelProfile(
        t_f=t_step / 3,
        t_b=t_step * 2 / 3,
        t_u=0.0,
        grad_gb=base["grad_bytes"] / 1e9,
        activation_gb=0.0,
        microbatches=1,
    )
    links = [SEED_002_LINKS["cross_continent"]] * (n - 1)
    plan = plan_regional(prof, arm["tensor_sizes"], links, steps, "int8", local_steps=h).to_dict()
    pred_bytes, pred_sync = float(plan["bytes_per_round"]), float(plan["sync_s_per_round"])
    return {
        "predicted_bytes_per_round": pred_bytes,
        "measured_bytes_per_round": arm["bytes_per_round"],
        "bytes_error": arm["bytes_per_round"] / pred_bytes - 1,
        "predicted_sync_s_per_round": pred_sync,
        "measured_sync_s_per_round": arm["sync_s_per_round"],
        "sync_error": arm["sync_s_per_round"] / pred_sync - 1,
        "predicted_sync_dp_bytes": plan["sync_dp_bytes"],
        "measured_sync_dp_bytes": base["bytes_crossing"],
        "predicted_wall_ratio": plan["wall_ratio"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="200 steps per region (labelled quick)")
    p.add_argument("--smoke", action="store_true", help="8 steps: checks the harness only")
    p.add_argument("--regions", default="2,4")
    p.add_argument("--local-steps", default=None, help="H values, comma separated")
    p.add_argument("--steps", type=int, default=None, help="inner steps per region")
    p.add_argument(
        "--ablate",
        action="store_true",
        help="the ablations (2 regions, 200 steps): results/regional_ablations.json",
    )
    p.add_argument("--out", default=None, help="the JSON to write")
    args = p.parse_args()
    if args.ablate:
        return ablate(args.steps or MODES["quick"]["steps"], args.out)
    args.out = args.out or str(REPO / "benchmarks" / "results" / "regional.json")
    mode = "smoke" if args.smoke else "quick" if args.quick else "full"
    steps = args.steps or MODES[mode]["steps"]
    hs = (
        tuple(int(v) for v in args.local_steps.split(","))
        if args.local_steps
        else MODES[mode]["local_steps"]
    )
    started = time.perf_counter()
    _, _, corpus = load_corpus(1)
    results: dict[str, Any] = {
        "mode": mode,
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "seed": SEED,
        "steps_per_region": steps,
        "model": {
            "width": WIDTH,
            "layers": LAYERS,
            "heads": HEADS,
            "context": CONTEXT,
            "batch": BATCH,
            "inner": f"AdamW lr {INNER_LR}",
            "outer": "burst: Nesterov lr 0.7 momentum 0.9 (DiLoCo, the spec's default); "
            "burst_outer_sgd: sgd lr 1.0 momentum 0 (FedAvg: the regions' models averaged)",
            "codec": "int8, blocks of 256",
        },
        "link": "seed 002 cross_continent: 0.18 GB/s, 102 ms, $0.05/GB, every pair of regions",
        "corpus": corpus,
        "goals": {k: f"<= {v}" for k, v in GOALS.items()}
        | {"planner": f"within {PLANNER_TOLERANCE:.0%}"},
        "regions": {},
    }
    for n in (int(v) for v in args.regions.split(",")):
        base = run(n, steps, None)
        print(
            json.dumps(
                {
                    "regions": n,
                    "arm": "sync_dp",
                    **{k: base[k] for k in ("eval_loss", "bytes_crossing", "wall_s")},
                }
            ),
            flush=True,
        )
        row: dict[str, Any] = {"names": list(REGION_NAMES[:n]), "sync_dp": base}
        row["shard_bytes"] = [len(s) for s in load_corpus(n)[0]]
        for arm_name in MODES[mode]["arms"]:
            row[arm_name] = {}
            for h in hs:
                arm = burst_arm(n, steps, h, base, ARMS[arm_name])
                row[arm_name][str(h)] = arm
                shown = ("eval_loss", "bytes_ratio", "eval_loss_ratio", "wall_ratio")
                line = {"regions": n, "arm": arm_name, "H": h} | {k: arm[k] for k in shown}
                print(json.dumps(line), flush=True)
                write(
                    args.out,
                    results | {"regions": results["regions"] | {str(n): row}},
                    started,
                    complete=False,
                )
        base.pop("tensor_sizes")
        results["regions"][str(n)] = row
        write(args.out, results, started, complete=False)  # what is done so far survives a stop
    write(args.out, results, started, complete=True)
    print(f"wrote {args.out}")
    return 0


def burst_arm(
    n: int, steps: int, h: int, base: dict[str, Any], variant: dict[str, Any]
) -> dict[str, Any]:
    """One burst arm against the baseline ``base``: its figures, ratios, planner check, goals."""
    arm = run(n, steps, h, variant)
    arm["bytes_ratio"] = arm["bytes_crossing"] / base["bytes_crossing"]
    arm["eval_loss_ratio"] = arm["eval_loss"] / base["eval_loss"]
    arm["wall_ratio"] = arm["wall_s"] / base["wall_s"]
    arm["planner"] = planner(n, steps, h, base, arm)
    arm["meets_goals"] = {k: arm[k] <= v for k, v in GOALS.items()} | {
        "planner": abs(arm["planner"]["bytes_error"]) <= PLANNER_TOLERANCE
        and abs(arm["planner"]["sync_error"]) <= PLANNER_TOLERANCE
    }
    arm.pop("tensor_sizes")
    return arm


def ablate(steps: int, out: str | None) -> int:
    """Each ablation of ``ABLATIONS`` on 2 regions; eval-loss ratios against the S of the same
    schedule and data split (the defaults' S, or "S iid" / "S cosine")."""
    started = time.perf_counter()
    path = out or str(REPO / "benchmarks" / "results" / "regional_ablations.json")
    results: dict[str, Any] = {
        "mode": "ablate",
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "seed": SEED,
        "regions": 2,
        "steps_per_region": steps,
        "defaults": DEFAULT_VARIANT,
        "runs": {},
    }
    for name, h, variant in ABLATIONS:
        arm = run(2, steps, h, variant)
        base_name = "S iid" if variant.get("iid") else "S cosine" if "schedule" in variant else "S"
        row = {"H": h, "variant": variant, "eval_loss": arm["eval_loss"]}
        base = results["runs"].get(base_name)
        if h is not None and base is not None:
            row["eval_loss_ratio"] = arm["eval_loss"] / base["eval_loss"]
            row["against"] = base_name
        results["runs"][name] = row
        print(json.dumps({"ablation": name} | row), flush=True)
        write(path, results, started, complete=False)
    write(path, results, started, complete=True)
    print(f"wrote {path}")
    return 0


def write(out: str, results: dict[str, Any], started: float, *, complete: bool) -> None:
    results["complete"] = complete
    results["elapsed_s"] = round(time.perf_counter() - started, 1)
    write_results(out, results)


if __name__ == "__main__":
    sys.exit(main())
