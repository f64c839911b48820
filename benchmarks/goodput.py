"""Goodput under failure: one real local run through a failure trace, its recovery split, lost
work per event, and the simulator's prediction for the same trace (issue 44).

    python benchmarks/goodput.py [--seed 44] [--steps 480] [--mtbf-steps 120]
                                 [--out benchmarks/results/goodput.json]

The quickstart (examples/quickstart.yaml) runs end to end with ``burst run``: the real runner,
real train processes, a real SIGTERM at each notice of the trace (``BURST_PREEMPT_AT_STEPS``,
burst.faults), a real emergency save into the run's checkpoint store, exit 75, the requeue,
a cold train process that restores and goes on. Each step is paced to ``--step-seconds``
(``BURST_STEP_PACE_S``: a GPU step's time, the CPU model's own step is ~10 ms).

The trace (seeded): events of a Poisson process with a mean of ``--mtbf-steps`` steps of
training, over a run of ``--steps`` steps; their kinds take turns in a seeded order through
``KINDS``: a preemption notice with a 30-s window (GCP's and Azure's spot notice), one with a
2-min window (AWS's), a node lost without a notice (its pod deleted: the train process and its
memory gone, Argo's "pod deleted"), and a rank killed (SIGKILL: exit 137, its node stays). Each
is a real event of the run (``BURST_PREEMPT_AT_STEPS`` ``STEP:notice=SECONDS|node|rank``,
burst.faults): the notice a real SIGTERM whose deadline is its window, the node loss and the
rank death real SIGKILLs. The checkpoint interval is burst's own (``interval_steps: auto``,
Young/Daly from the measured checkpoint cost) with the trace's MTBF as the spec's
``compute.mtbf_hours`` on spot capacity, as a user who knows the failure rate of the capacity
sets it, and every checkpoint is a full one (``full_every: 1``: the state is small, and only a
full checkpoint resumes exactly).

The clock is scaled: one paced second of training stands for one minute of a real run (the
default trace is an event every 2 h, on average, of an 8-h job); the restart terms are not
scaled (they are this machine's real seconds: a local restart of ~5 s stands for a cloud
restart of ~5 min, provision and image pull included). The scaling is checked by the measured
step time (the attempts' own ``measured.step_s``) against the pace.

Measured:
  paid_s        the train step's placements' wall time (the report's train attempts), all of
                it: cold starts, the saves, the time after each notice; and after a rank
                killed, the wait until its retry's pod starts (its node stays rented)
  useful_s      the steps kept in the final model (each attempt's steps up to where the next
                attempt resumed; the last attempt's to the end) x that attempt's step time;
                steps re-done after a restore are paid, not useful
  effective_training_time = useful_s / paid_s
  recovery split: burst.obs.recovery_split on the run (medians per term)
  cold start: a train process's imports (wall and CPU seconds of a fresh interpreter that
                imports what the train step and the example model import)

  per event: its kind, the steps lost (trained, then re-done after the restore) and the paid
                seconds of the attempt it ended that kept no step

Predicted: ``burst.plan.goodput.simulate`` (``burst simulate``) on the same trace with the
measured parameters: checkpoint cost and upload (medians of the attempts' measurements), step
time, the interval the run used, notice-to-end (detect + save + teardown: the paid time after a
notice) as each notice's notice (0 for a node lost or a rank killed: no notice), and the rest of
the gap (provision .. first step) as the restart.
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
from burst.obs.run_files import epoch_seconds
from burst.plan.goodput import SimParams, simulate

GOALS = {"effective_training_time": (">=", 0.95), "simulator_error_points": ("<=", 5.0)}
IMPORTS = "import burst.steps.train, burst.train.loop, burst.train.example, torch"
#: the event kinds of the trace, as BURST_PREEMPT_AT_STEPS writes them after ``STEP:``
KINDS = ("notice=30", "notice=120", "node", "rank")
NOTICE_TERMS = ("detect", "save", "teardown")


def trace_events(seed: int, steps: int, mtbf_steps: float) -> list[tuple[int, str]]:
    """(step, kind): a seeded Poisson process over ``steps`` steps of training, the kinds
    taking turns in a seeded order of ``KINDS`` (every kind before any comes twice)."""
    rng = random.Random(seed)
    order = list(KINDS)
    rng.shuffle(order)
    out: list[tuple[int, str]] = []
    t = 0.0
    while True:
        t += rng.expovariate(1.0 / mtbf_steps)
        step = max(1, round(t))
        if step >= steps:
            return out
        if not out or step > out[-1][0]:
            out.append((step, order[len(out) % len(order)]))


def cold_start() -> dict[str, float]:
    """A fresh interpreter importing what a train process imports before its first step."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    subprocess.run([sys.executable, "-c", IMPORTS], check=True, cwd=REPO)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"wall_s": round(wall, 3), "cpu_s": round(cpu, 3)}


def run_once(
    work: Path, steps: int, events: list[tuple[int, str]], pace: float, mtbf_s: float
) -> Path:
    spec = work / "goodput.yaml"
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    edits = {
        "checkpoint_uri: file://checkpoints": f"checkpoint_uri: file://{work}/store",
        "  steps: 30\n": f"  steps: {steps}\n",
        "    interval_steps: 5\n": "    interval_steps: auto\n",
        "    full_every: 2\n": "    full_every: 1\n",
        "  capacity: spot_with_fallback\n": "  capacity: spot\n",
        "  providers: [aws]\n": f"  providers: [aws]\n  mtbf_hours: {mtbf_s / 3600:.6f}\n",
    }
    for old, new in edits.items():
        if old not in text:
            sys.exit(f"goodput: examples/quickstart.yaml has no {old.strip()!r} to change")
        text = text.replace(old, new)
    spec.write_text(text)
    env = {
        **os.environ,
        "BURST_STEP_PACE_S": str(pace),
        "BURST_PREEMPT_AT_STEPS": ",".join(f"{n}:{kind}" for n, kind in events),
    }
    root = work / "runs"
    cmd = [sys.executable, "-m", "burst.cli.main", "run", str(spec), "--run-id", "goodput"]
    proc = subprocess.run(
        [*cmd, "--runs-root", str(root)], env=env, cwd=REPO, capture_output=True, text=True
    )
    run_dir = root / "goodput"
    if proc.returncode != 0 or not (run_dir / "report.json").exists():
        sys.exit(
            f"goodput: the run left no report (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return run_dir


def _train_step(report: dict[str, Any]) -> dict[str, Any]:
    return next(s for s in report["steps"] if s["name"] == "train")


def measure(
    run_dir: Path, steps: int, pace: float, events: list[tuple[int, str]]
) -> dict[str, Any]:
    report = json.loads((run_dir / "report.json").read_text())
    pods = _train_step(report)["attempt_details"]
    paid = sum(float(p["seconds"]) for p in pods)
    # a rank killed leaves its node rented: the wait until its retry's pod starts is paid too
    held = _rank_death_waits(pods, events)
    paid += sum(held)
    recs: list[TrainAttempt] = attempt_records.settle_unclosed(
        attempt_records.read_file(run_dir / ATTEMPTS_FILE)
    )
    if len(recs) != len(events) + 1 or len(pods) != len(recs):
        sys.exit(
            f"goodput: {len(events)} events, {len(recs)} attempt records and {len(pods)} train "
            "placements: the run did not go as the trace says (see its report)"
        )
    per_attempt = []
    useful = lost_steps = 0.0
    for i, r in enumerate(recs):
        start = r.resumed_from or 0
        # an attempt killed (a node lost, a rank killed) left its record open: it trained to
        # the event's step, which its last renewal may not have recorded
        end = events[i][0] if i < len(events) else (r.ended_at_step or r.at_step or start)
        kept_to = (recs[i + 1].resumed_from or 0) if i + 1 < len(recs) else end
        kept = max(0, min(end, kept_to) - start)
        step_s = (r.measured or {}).get("step_s") or pace
        useful += kept * step_s
        lost_steps += max(0, end - kept_to)
        paid_i = float(pods[i]["seconds"]) if i < len(pods) else None
        per_attempt.append(
            {
                "attempt": r.attempt,
                "ended_by": events[i][1] if i < len(events) else None,
                "outcome": r.outcome,
                "recovery_source": r.recovery_source,
                "steps_lost": max(0, end - kept_to),
                "paid_not_kept_s": (round(paid_i - kept * step_s, 3) if paid_i else None),
                "resumed_from": start,
                "ended_at_step": end,
                "steps_kept": kept,
                "step_s": round(step_s, 4),
                "paid_s": paid_i,
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
        "paid_rank_death_waits_s": [round(x, 3) for x in held],
        "useful_s": round(useful, 3),
        "useful_s_at_pace": round(steps * pace, 3),
        "lost_steps": lost_steps,
        "effective_training_time": round(useful / paid, 4) if paid else None,
        "attempts": per_attempt,
        "checkpoint_interval_steps": _intervals(recs),
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


def _rank_death_waits(pods: list[dict[str, Any]], events: list[tuple[int, str]]) -> list[float]:
    """Seconds between the end of each pod a rank death ended and its retry's start."""
    out = []
    for i, (_, kind) in enumerate(events):
        if kind != "rank" or i + 1 >= len(pods):
            continue
        end = epoch_seconds(pods[i].get("started_at"))
        nxt = epoch_seconds(pods[i + 1].get("started_at"))
        if end is not None and nxt is not None:
            out.append(max(0.0, nxt - (end + float(pods[i]["seconds"]))))
    return out


def _intervals(recs: list[TrainAttempt]) -> list[int]:
    """The checkpoint interval (steps) each attempt ended with, in order."""
    return [
        r.checkpoint_interval.interval_steps
        for r in recs
        if r.checkpoint_interval is not None and r.checkpoint_interval.interval_steps is not None
    ]


def _first_start(run_dir: Path, pod: dict[str, Any]) -> float | None:
    """The first attempt's cold start: its placement's start to its first training step."""
    from burst.obs.recovery_split import _log_records

    start = epoch_seconds(pod.get("started_at"))
    for r in _log_records(run_dir / "logs" / "train.log"):
        if r.get("event") == "train.first_step" and start is not None:
            return round(r["_t"] - start, 3)
    return None


def predict(
    measured: dict[str, Any], steps: int, events: list[tuple[int, str]], pace: float
) -> dict[str, Any]:
    """The simulator on the same trace, with the run's measured parameters and interval."""
    chosen = measured["checkpoint_interval_steps"]
    interval_steps = chosen[-1] if chosen else 1
    m = measured["recovery_split"]["median_s"]
    mm = measured["measured_medians"]
    step_s = mm["step_s"] or pace
    # notice to the end of the old placement, over the restarts a notice began (a killed
    # attempt's placement ends as it dies: no notice, no save, no wait)
    after_notice = [
        sum(t["seconds"] or 0.0 for name, t in r["terms"].items() if name in NOTICE_TERMS)
        for r in measured["recovery_split"]["restarts"]
        if r["gap_from"] == "notice"
    ]
    notice_s = statistics.median(after_notice) if after_notice else 0.0
    restart_s = sum(m[k] or 0.0 for k in ("provision", "pull", "startup", "restore", "first_step"))
    # the simulator's clock is paid time: event k arrives after its steps and the notices and
    # restarts before it (checkpoint blocking, ~1 ms a checkpoint, is left out of the trace);
    # an event without a notice (a node lost, a rank killed) gives none
    notices = [notice_s if kind.startswith("notice") else 0.0 for _, kind in events]
    kills, t_extra = [], 0.0
    for (n, _), notice in zip(events, notices, strict=True):
        kills.append(n * step_s + t_extra + notice)
        t_extra += notice + restart_s
    p = SimParams(
        notice_s=notice_s,
        checkpoint_cost_s=mm["checkpoint_blocking_s"] or 0.0,
        step_s=step_s,
        upload_s=mm["upload_s"] or 0.0,
        restart_s=restart_s,
        work_s=steps * step_s,
    )
    s = simulate(p, interval_steps * step_s, trace=kills, notices=notices)
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
            "notices_s": [round(n, 3) for n in notices],
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
    ap.add_argument("--steps", type=int, default=480, help="training steps (default 480)")
    ap.add_argument("--mtbf-steps", type=float, default=120.0, help="mean steps between events")
    ap.add_argument("--step-seconds", type=float, default=1.0, help="pace of a step")
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "goodput.json"))
    args = ap.parse_args()
    events = trace_events(args.seed, args.steps, args.mtbf_steps)
    load_before = os.getloadavg()
    note = machine_note()
    cold = cold_start()
    with tempfile.TemporaryDirectory(prefix="burst-goodput-") as tmp:
        t0 = time.monotonic()
        run_dir = run_once(
            Path(tmp), args.steps, events, args.step_seconds, args.mtbf_steps * args.step_seconds
        )
        wall = time.monotonic() - t0
        measured = measure(run_dir, args.steps, args.step_seconds, events)
    predicted = predict(measured, args.steps, events, args.step_seconds)
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
            "kind": "Poisson (seeded); in turn 30-s and 2-min notices, node lost, rank killed",
            "steps": args.steps,
            "mean_steps_between_events": args.mtbf_steps,
            "events": [{"after_step": n, "kind": kind} for n, kind in events],
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
