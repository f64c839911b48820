"""Goodput under preemption notices: one real local run, its recovery split, and the simulator's
prediction for the same trace (issue 44).

    python benchmarks/goodput.py [--seed 44] [--steps 240] [--mtbf-steps 120]
                                 [--out benchmarks/results/goodput.json]

The quickstart (examples/quickstart.yaml) runs end to end with ``burst run``: the real runner,
real train processes, a real SIGTERM at each notice of the trace (``BURST_PREEMPT_AT_STEPS``,
burst.faults), a real emergency save into the run's checkpoint store, exit 75, the requeue,
a cold train process that restores and goes on. Each step is paced to ``--step-seconds``
(``BURST_STEP_PACE_S``: a GPU step's time, the CPU model's own step is ~10 ms).

The trace (seeded): notices of a Poisson process with a mean of ``--mtbf-steps`` steps of
training, over a run of ``--steps`` steps, each with the notice window ``--notice-window``
(``BURST_SIGTERM_GRACE_S``; 30 s, GCP's and Azure's spot notice). The clock is scaled: one
paced second of training stands for one minute of a real run (the default trace is a notice
every 2 h, on average, of a 4-h job); the restart terms are not scaled (they are this machine's
real seconds: a local restart of ~10 s stands for a cloud restart of ~10 min, provision and
image pull included). The scaling is checked by the measured step time (the attempts' own
``measured.step_s``) against the pace.

Measured:
  paid_s        the train step's placements' wall time (the report's train attempts), all of
                it: cold starts, the saves, the time after each notice
  useful_s      the steps kept in the final model (each attempt's steps up to where the next
                attempt resumed; the last attempt's to the end) x that attempt's step time;
                steps re-done after a restore are paid, not useful
  effective_training_time = useful_s / paid_s
  recovery split: burst.obs.recovery_split on the run (medians per term)
  cold start: a train process's imports (wall and CPU seconds of a fresh interpreter that
                imports what the train step and the example model import)

Predicted: ``burst.plan.goodput.simulate`` (``burst simulate``) on the same trace with the
measured parameters: checkpoint cost and upload (medians of the attempts' measurements), step
time, notice-to-end (detect + save + teardown: the paid time after a notice) as the notice,
and the rest of the gap (provision .. first step) as the restart.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import REPO, machine_note, write_results

from burst import attempt_records
from burst.documents import ATTEMPTS_FILE, TrainAttempt
from burst.obs.recovery_split import TERMS, medians, split_run
from burst.plan.goodput import SimParams, simulate

GOALS = {"effective_training_time": (">=", 0.95), "simulator_error_points": ("<=", 5.0)}
IMPORTS = "import burst.steps.train, burst.train.loop, burst.train.example, torch"


def trace_steps(seed: int, steps: int, mtbf_steps: float) -> list[int]:
    """Notice steps: a seeded Poisson process over ``steps`` steps of training."""
    rng = random.Random(seed)
    out: list[int] = []
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf_steps)
        step = max(1, round(t))
        if step >= steps:
            return out
        if not out or step > out[-1]:
            out.append(step)


def cold_start() -> dict[str, float]:
    """A fresh interpreter importing what a train process imports before its first step."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", IMPORTS], check=True, cwd=REPO)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def run_once(work: Path, steps: int, notices: list[int], pace: float, window: float) -> Path:
    spec = work / "goodput.yaml"
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    text = text.replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{work}/store"
    )
    text = text.replace("  steps: 30\n", f"  steps: {steps}\n")
    spec.write_text(text)
    env = {
        **os.environ,
        "BURST_STEP_PACE_S": str(pace),
        "BURST_SIGTERM_GRACE_S": str(window),
        "BURST_PREEMPT_AT_STEPS": ",".join(map(str, notices)),
    }
    root = work / "runs"
    cmd = [sys.executable, "-m", "burst.cli.main", "run", str(spec), "--run-id", "goodput"]
    proc = subprocess.run(
        [*cmd, "--runs-root", str(root)], env=env, cwd=REPO, capture_output=True, text=True
    )
    run_dir = root / "goodput"
    if not (run_dir / "report.json").exists():
        sys.exit(
            f"goodput: the run left no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return run_dir


def _train_step(report: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["name"] == "train")


def measure(run_dir: Path, steps: int, pace: float) -> dict[str, Any]:
    report = json.loads((run_dir / "report.json").read_text())
    pods = _train_step(report)["attempt_details"]
    paid = sum(float(p["seconds"]) for p in pods)
    recs: list[TrainAttempt] = attempt_records.settle_unclosed(
        attempt_records.read_file(run_dir / ATTEMPTS_FILE)
    )
    per_attempt = []
    useful = lost_steps = 0.0
    for i, r in enumerate(recs):
        start = r.resumed_from or 0
        end = r.ended_at_step or r.at_step or start
        kept_to = (recs[i + 1].resumed_from or 0) if i + 1 < len(recs) else end
        kept = max(0, min(end, kept_to) - start)
        step_s = (r.measured or {}).get("step_s") or pace
        useful += kept * step_s
        lost_steps += max(0, end - kept_to)
        per_attempt.append(
            {
                "attempt": r.attempt,
                "outcome": r.outcome,
                "resumed_from": start,
                "ended_at_step": end,
                "steps_kept": kept,
                "step_s": round(step_s, 4),
                "paid_s": float(pods[i]["seconds"]) if i < len(pods) else None,
                "emergency_save": (r.emergency_save.tier if r.emergency_save else None),
                "measured": r.measured,
            }
        )
    split = split_run(run_dir)
    m = medians(split)

    def med(key: str) -> float | None:
        xs = [float(v) for r in recs if r.measured and (v := r.measured.get(key)) is not None]
        return statistics.median(xs) if xs else None

    first_pod = pods[0]
    return {
        "status": report.get("status"),
        "final_step": report.get("final_step"),
        "final_weights_sha256": report.get("final_weights_sha256"),
        "paid_s": round(paid, 3),
        "useful_s": round(useful, 3),
        "useful_s_at_pace": round(steps * pace, 3),
        "lost_steps": lost_steps,
        "effective_training_time": round(useful / paid, 4) if paid else None,
        "attempts": per_attempt,
        "first_attempt_start_s": _first_start(run_dir, first_pod),
        "recovery_split": {
            "median_s": m,
            "restarts": [r.as_dict() for r in split],
        },
        "measured_medians": {
            "step_s": med("step_s"),
            "checkpoint_blocking_s": med("blocking_s"),
            "upload_s": med("upload_s"),
        },
    }


def _first_start(run_dir: Path, pod: dict[str, Any]) -> float | None:
    """The first attempt's cold start: its placement's start to its first training step."""
    from burst.obs.recovery_split import _log_records
    from burst.obs.run_files import epoch_seconds

    start = epoch_seconds(pod.get("started_at"))
    for r in _log_records(run_dir / "logs" / "train.log"):
        if r.get("event") == "train.first_step" and start is not None:
            return round(r["_t"] - start, 3)
    return None


def predict(
    measured: dict[str, Any], steps: int, notices: list[int], pace: float, interval_steps: int
) -> dict[str, Any]:
    """The simulator on the same trace, with the run's measured parameters."""
    m = measured["recovery_split"]["median_s"]
    mm = measured["measured_medians"]
    step_s = mm["step_s"] or pace
    notice_s = sum(m[k] or 0.0 for k in ("detect", "save", "teardown"))
    restart_s = sum(m[k] or 0.0 for k in ("provision", "pull", "startup", "restore", "first_step"))
    # the simulator's clock is paid time: notice k arrives after its steps and the notices and
    # restarts before it (checkpoint blocking, ~1 ms a checkpoint, is left out of the trace)
    kills = [n * step_s + k * (notice_s + restart_s) + notice_s for k, n in enumerate(notices)]
    p = SimParams(
        notice_s=notice_s,
        checkpoint_cost_s=mm["checkpoint_blocking_s"] or 0.0,
        step_s=step_s,
        upload_s=mm["upload_s"] or 0.0,
        restart_s=restart_s,
        work_s=steps * step_s,
    )
    s = simulate(p, interval_steps * step_s, trace=kills)
    return {
        "params": {
            "notice_s": round(notice_s, 3),
            "restart_s": round(restart_s, 3),
            "checkpoint_cost_s": p.checkpoint_cost_s,
            "upload_s": p.upload_s,
            "step_s": step_s,
            "work_s": p.work_s,
            "interval_s": interval_steps * step_s,
            "trace_s": [round(k, 3) for k in kills],
        },
        "goodput": round(s.goodput, 4),
        "summary": s.as_dict(),
        "cli": (
            f"burst simulate --notice {notice_s:.3f} --checkpoint-cost "
            f"{p.checkpoint_cost_s:.6f} --upload-time {p.upload_s:.4f} --step-time {step_s:.4f} "
            f"--restart {restart_s:.3f} --work {p.work_s:.1f} --interval "
            f"{interval_steps * step_s:.3f} --trace FILE"
        ),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=44)
    ap.add_argument("--steps", type=int, default=240, help="training steps (default 240)")
    ap.add_argument("--mtbf-steps", type=float, default=120.0, help="mean steps between notices")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="pace of a step")
    ap.add_argument("--notice-window", type=float, default=30.0, help="notice window, seconds")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "goodput.json"))
    args = ap.parse_args()
    notices = trace_steps(args.seed, args.steps, args.mtbf_steps)
    load_before = os.getloadavg()
    note = machine_note()
    cold = cold_start()
    with tempfile.TemporaryDirectory(prefix="burst-goodput-") as tmp:
        t0 = time.monotonic()
        run_dir = run_once(Path(tmp), args.steps, notices, args.step_seconds, args.notice_window)
        wall = time.monotonic() - t0
        measured = measure(run_dir, args.steps, args.step_seconds)
    predicted = predict(measured, args.steps, notices, args.step_seconds, interval_steps=5)
    eff = measured["effective_training_time"]
    error = abs(eff - predicted["goodput"]) * 100 if eff is not None else None
    doc = {
        "benchmark": "goodput",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": note,
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in os.getloadavg()],
        "seed": args.seed,
        "trace": {
            "kind": "preemption notices, Poisson (seeded)",
            "steps": args.steps,
            "mean_steps_between_notices": args.mtbf_steps,
            "notice_steps": notices,
            "notice_window_s": args.notice_window,
            "step_pace_s": args.step_seconds,
            "clock": "1 paced second of training = 1 min of a real run; restart terms unscaled",
        },
        "run_wall_s": round(wall, 1),
        "cold_start_imports": cold,
        "measured": measured,
        "predicted": predicted,
        "simulator_error_points": round(error, 2) if error is not None else None,
        "goals": {k: f"{op} {v}" for k, (op, v) in GOALS.items()},
        "meets": {
            "effective_training_time": eff is not None and eff >= 0.95,
            "simulator_error_points": error is not None and error <= 5.0,
        },
        "terms": list(TERMS),
    }
    write_results(args.out, doc)
    print(json.dumps({k: doc[k] for k in ("trace", "simulator_error_points", "meets")}, indent=1))
    print(f"effective training time {eff}; predicted {predicted['goodput']}")
    print("recovery split medians:", json.dumps(measured["recovery_split"]["median_s"]))


if __name__ == "__main__":
    main()
