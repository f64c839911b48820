"""Preemption benchmark: does the emergency-save estimate hold, and what does a save cost?

    python benchmarks/preemption.py [--quick] [--reps N] [--out FILE]

The decision "full if it fits, else weights-only, else none" (burst.preempt.emergency) rests
on an estimate made from the run's own measured commits. Against one `rclone serve s3` on
loopback, with a model whose full state is ~150 MB (~60 MB quick), it alternates full and
weights-only saves (A and B), each after an optimizer step so every chunk is new, and
compares the time from save() to commit with what the loop would have estimated just before.
Medians of --reps (at least 3). Written as JSON to benchmarks/results/preemption.json:

  estimate_ratio_full      actual seconds to commit / estimate, full          (<= SAFETY, 2.0)
  estimate_ratio_weights   the same, weights only                             (<= 2.0)
  full_over_weights        commit time full / weights-only (what choosing weights saves)
  blocking_ratio_full      time training is blocked / time to commit, full    (small)
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from harness import REPO, alternate, loopback_s3, median, write_results
from torch import nn

from burst.checkpoint import CheckpointManager
from burst.preempt.emergency import SAFETY, SaveMeter
from burst.storage import open_store
from burst.train.checkpoints import state_nbytes
from burst.train.example import FEATURES

GOALS = (
    "estimate_ratio_full",
    "estimate_ratio_weights",
    "full_over_weights",
    "blocking_ratio_full",
)


def build(width: int) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(FEATURES, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, width),
        nn.ReLU(),
        nn.Linear(width, 1),
    )
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    x = torch.randn(64, FEATURES)
    opt.zero_grad()
    model(x).square().mean().backward()
    opt.step()


def state(model: nn.Module, opt: torch.optim.Optimizer, tier: str, n: int) -> dict[str, Any]:
    s: dict[str, Any] = {"step": n, "model": model.state_dict()}
    if tier == "full":
        s["optimizer"] = opt.state_dict()
    return s


def timed_save(
    mgr: CheckpointManager,
    meter: SaveMeter,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    tier: str,
    n: int,
) -> dict[str, float]:
    step(model, opt)  # new values everywhere: no chunk can be reused
    st = state(model, opt, tier, n)
    costs = meter.costs(
        state_nbytes(state(model, opt, "full", n)), state_nbytes(model.state_dict())
    )
    estimate = costs.estimate_s(tier)
    t0 = time.perf_counter()
    mgr.save(n, st, tier)
    blocked = time.perf_counter() - t0
    mgr.wait()
    actual = time.perf_counter() - t0
    last = mgr.status().last_committed
    assert last is not None and last.step == n
    meter.record(last.total_bytes, last.uploaded_bytes, last.stall_seconds, last.seconds)
    return {"estimate": estimate, "actual": actual, "blocked": blocked}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/preemption.json")
    args = ap.parse_args()
    reps = max(3, args.reps)
    width = 1200 if args.quick else 2000
    model, opt = build(width)
    step(model, opt)
    with tempfile.TemporaryDirectory() as tmp, loopback_s3(Path(tmp) / "s3") as server:
        server.create_bucket("bench")
        mgr = CheckpointManager(open_store("s3://bench/preempt"), keep_full=2, keep_weights=2)
        meter = SaveMeter()
        n = 0
        for tier in ("full", "weights"):  # warm up: the loop has measured a few commits
            n += 1
            timed_save(mgr, meter, model, opt, tier, n)
        counter = itertools.count(n + 1)  # each save its own step
        full, weights = alternate(
            reps,
            lambda: timed_save(mgr, meter, model, opt, "full", next(counter)),
            lambda: timed_save(mgr, meter, model, opt, "weights", next(counter)),
        )
        runs: dict[str, list[dict[str, float]]] = {"full": full, "weights": weights}
        mgr.close()

    def med(tier: str, key: str) -> float:
        return median(r[key] for r in runs[tier])

    doc = {
        "benchmark": "preemption",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "reps": reps,
        "state_bytes_full": state_nbytes(state(model, opt, "full", 0)),
        "state_bytes_weights": state_nbytes(model.state_dict()),
        "estimate_ratio_full": median(r["actual"] / r["estimate"] for r in runs["full"]),
        "estimate_ratio_weights": median(r["actual"] / r["estimate"] for r in runs["weights"]),
        "estimate_ratio_max": max(r["actual"] / r["estimate"] for t in runs for r in runs[t]),
        "safety_margin": SAFETY,
        "full_over_weights": med("full", "actual") / med("weights", "actual"),
        "blocking_ratio_full": med("full", "blocked") / med("full", "actual"),
        "median_seconds": {
            t: {k: med(t, k) for k in ("estimate", "actual", "blocked")} for t in runs
        },
    }
    write_results(args.out, doc)
    print(json.dumps({k: doc[k] for k in (*GOALS, "estimate_ratio_max")}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
