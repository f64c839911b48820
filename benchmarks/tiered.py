"""Tiered inference on loopback: the serving paths' latency, deadlines, the fallback matrix,
residency, and the distilled model against the heavy one (docs/inference.md).

    python benchmarks/tiered.py                       # trains the quickstart, distils, serves
    python benchmarks/tiered.py --run RUN --runs-root DIR   # an existing run's tiers
    python benchmarks/tiered.py --quick               # fewer requests (a smoke run)

Writes benchmarks/results/tiered.json (--out). What is emulated: the round trips between
regions (seed 002's cross-continent link through burst's link emulator: 102 ms one way plus
bytes / 0.18 GB/s) and each tier's model time (5 ms distilled, 30 ms heavy, slept by the tier
server); what is measured: everything else (loopback HTTP, the router, the models' forward on
this CPU, queueing). Loopback latencies are never cross-region latencies.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from harness import REPO, machine_note, write_results

from burst.inference.faults import FAULTS, TRITON_FAULTS

RESULTS = REPO / "benchmarks" / "results" / "tiered.json"
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def train_quickstart(runs_root: Path, run_id: str) -> None:
    """The quickstart's train step, as the pipeline runs it (a real run, its store)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "BURST_RUNS_ROOT": str(runs_root)}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.train",
            "--spec",
            str(QUICKSTART),
            "--run-id",
            run_id,
            "--runs-root",
            str(runs_root),
        ],
        check=True,
        cwd=REPO,
        env=env,
        capture_output=True,
        timeout=600,
    )


def triton_scenarios(
    args: argparse.Namespace, models: Any, residency: Any, emulator: Any, load: Any
) -> dict[str, Any]:
    """The same load with the tiers served by NVIDIA Triton (one process per tier, the tier's
    TorchScript export), under the faults a Triton tier supports here."""
    from burst.inference.serve import (
        DEFAULT_PLACEMENT,
        TritonEngine,
        export_torchscript,
        run_scenario,
    )

    out: dict[str, Any] = {"python": args.triton_python, "scenarios": {}}
    with tempfile.TemporaryDirectory(prefix="burst-tiers-") as scratch:
        engine = TritonEngine(
            args.triton_python, export_torchscript(models, Path(scratch)), tuple(args.triton_path)
        )
        for fault in TRITON_FAULTS:
            sc = run_scenario(
                fault,
                models,
                DEFAULT_PLACEMENT,
                residency,
                emulator,
                load,
                args.concurrency,
                engine,
            )
            out["scenarios"][fault] = {
                **sc.summary,
                "matrix": sc.matrix,
                "residency_breaches": sc.breaches,
            }
            print(
                f"triton, {fault}: landed {sc.matrix['landed_as_named']}/"
                f"{sc.matrix['requests']}, breaches {sc.breaches}",
                flush=True,
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--run", help="an existing run id (with --runs-root); default: train one")
    ap.add_argument("--runs-root", type=Path)
    ap.add_argument("--requests", type=int, default=120, help="requests per fault scenario")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--quick", action="store_true", help="30 requests a scenario")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument(
        "--triton-python",
        help="also serve the tiers with NVIDIA Triton: the Python of an environment with "
        "nvidia-pytriton and torch (the faults a Triton tier supports)",
    )
    ap.add_argument("--triton-path", action="append", default=[], help="import path for it")
    args = ap.parse_args()

    import torch

    from burst.inference.distill import distill, read_tiers
    from burst.inference.serve import DEFAULT_PLACEMENT, LoadSpec, deployment, run_scenario
    from burst.settings import Settings, use
    from burst.spec import load_spec

    requests = 30 if args.quick else args.requests
    job = load_spec(QUICKSTART)
    with tempfile.TemporaryDirectory(prefix="burst-tiered-") as tmp:
        runs_root = (args.runs_root or Path(tmp)).resolve()
        run_id = args.run or "tiered-bench"
        with use(Settings.from_env(env={**os.environ, "BURST_RUNS_ROOT": str(runs_root)})):
            if args.run is None:
                print(f"training the quickstart into {runs_root} ...", flush=True)
                train_quickstart(runs_root, run_id)
                print("distilling ...", flush=True)
                tiers = distill(job, run_id, runs_root=runs_root)
            else:
                tiers = read_tiers(job, run_id, runs_root)
            spec = LoadSpec(requests=requests, concurrency=args.concurrency)
            models, residency, emulator, load = deployment(
                job, run_id, runs_root=runs_root, load_spec=spec
            )
            scenarios: dict[str, Any] = {}
            landed = total = breaches = restricted = 0
            for fault in FAULTS:
                sc = run_scenario(
                    fault, models, DEFAULT_PLACEMENT, residency, emulator, load, args.concurrency
                )
                scenarios[fault] = {
                    **sc.summary,
                    "matrix": sc.matrix,
                    "residency_breaches": sc.breaches,
                }
                landed += sc.matrix["landed_as_named"]
                total += sc.matrix["requests"]
                breaches += sc.breaches
                restricted += sum(r.data_class == "personal" for r in sc.records)
                print(
                    f"{fault}: landed {sc.matrix['landed_as_named']}/{sc.matrix['requests']}, "
                    f"breaches {sc.breaches}, met {sc.summary['deadline_met_share_of_admitted']}",
                    flush=True,
                )
            triton: dict[str, Any] | None = None
            if args.triton_python:
                triton = triton_scenarios(args, models, residency, emulator, load)
    heavy, student, int8 = (tiers.tier(n) for n in ("heavy", "distilled", "distilled-int8"))
    admitted_met = [
        s["deadline_met_share_of_admitted"]
        for s in scenarios.values()
        if s["deadline_met_share_of_admitted"] is not None
    ]
    doc = {
        "measured_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "torch": torch.__version__,
        "seed": spec.seed,
        "emulated": {
            "round_trips": (
                "seed 002 cross_continent link between ap-southeast-1 (users, distilled tier) "
                "and me-central-1 (heavy tier): 102 ms one way + bytes / 0.18 GB/s, slept by "
                "burst.regional.links.LinkEmulator"
            ),
            "tier_compute_ms": {p.name: p.compute_ms for p in DEFAULT_PLACEMENT},
            "not_emulated": "loopback HTTP, the router, queueing, the models' forward on this CPU",
        },
        "load": {
            "requests_per_scenario": requests,
            "concurrency": args.concurrency,
            "classes": list(spec.classes),
            "origin": spec.origin,
            "entry_region": spec.entry_region,
            "budgets_ms": list(spec.budgets_ms),
            "high_fidelity_share": spec.high_fidelity_share,
            "repeat_share": spec.repeat_share,
        },
        "residency_table": {
            f"{k.data_class}/{k.origin} via {k.entry_region}": sorted(residency.allowed(k))
            for k in residency.rulings
        },
        "scenarios": scenarios,
        "fallback_matrix": {"landed_as_named": landed, "requests": total, "share": landed / total},
        "residency": {
            "breaches": breaches,
            "restricted_requests": restricted,
            "all_requests": total,
        },
        "deadline_met_share_of_admitted_min": min(admitted_met) if admitted_met else None,
        "tiers": {
            t.name: {
                "heldout_loss": t.heldout_loss,
                "size_bytes": t.size_bytes,
                "parameters": t.parameters,
                "latency_ms_p50_in_process": t.latency_ms_p50,
            }
            for t in tiers.tiers
        },
        "student_vs_heavy": {
            "heldout_loss_ratio": student.heldout_loss / heavy.heldout_loss,
            "int8_heldout_loss_ratio": int8.heldout_loss / heavy.heldout_loss,
            "size_ratio": student.size_bytes / heavy.size_bytes,
            "int8_size_ratio": int8.size_bytes / heavy.size_bytes,
            "latency_ratio_in_process": student.latency_ms_p50 / heavy.latency_ms_p50,
            "int8_latency_ratio_in_process": int8.latency_ms_p50 / heavy.latency_ms_p50,
            "heldout_samples": tiers.heldout_samples,
        },
        "triton": triton,
        "goals": {
            "deadline_met_share_of_admitted": ">= 1.0",
            "fallback_matrix_share": ">= 1.0",
            "residency_breaches": "<= 0",
        },
    }
    write_results(args.out, doc)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
