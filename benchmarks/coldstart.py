"""The train process's cold start and its exit after an emergency save, before and after a
change (issue 44: "cut what is cheap to cut, such as the train process's cold start").

    python benchmarks/coldstart.py [--before DIR] [--reps 5]
                                   [--out benchmarks/results/coldstart.json]

What the runner starts for the train step (``python -m burst.steps.train --spec ... --run-id
... --runs-root ...``, one process: the quickstart's world size is 1) on the quickstart spec
(examples/quickstart.yaml, its store moved to a scratch directory), measured from outside:

  start_to_first_step   from the spawn to the ``train.first_step`` line (the loop's first
                        training step begins): wall seconds, and the process's CPU seconds
                        (``/proc/PID/stat`` utime + stime, every thread) read as the line
                        arrives. Steps are paced (``BURST_STEP_PACE_S``) so that the process
                        sleeps after that line: the CPU read is the cold start's alone.
  start_to_watchers     from the spawn to the ``preemption watchers`` line (the step's
                        setup done, the loop's first act; the recovery split's ``startup``)
  save_to_exit          a notice after step 3 (``BURST_PREEMPT_AT_STEPS=3``): from the
                        emergency save's commit (the attempt record's
                        ``emergency_save.committed_at``) to the process's exit (75), wall
                        seconds (the recovery split's ``teardown`` less the runner's part);
                        ``cpu_after_last_line``: the CPU seconds the process spent after its
                        last line (the step's error line, as ``main`` returns)
  restart_*             the same as start_to_*, for the process that resumes from that
                        emergency save (the recovery split's startup + restore + first step)
  settle2_*             start_to_* again with the trainer lease's settle time of a remote
                        store (``BURST_LEASE_SETTLE_S=2``, S3's; the local store's is 0.2 s)
  imports               ``python -X importtime`` of the same command, once per side: the
                        modules imported and the ten costliest top-level imports

The change measured in benchmarks/results/coldstart.json: the train step's process ends with
``burst.train.quick_exit`` (no interpreter teardown after its records are written); "before"
is the same tree without it (``save_to_exit`` and ``cpu_after_last_line`` are its figures;
the cold-start figures are there to show that nothing else moved).

A/B: ``--before DIR`` is a tree of the code before the change (``git archive <rev> | tar -x
-C DIR``), run with ``PYTHONPATH=DIR`` from DIR; "after" is this checkout. The two sides
alternate (AB, BA, ...; harness.alternate); medians of ``--reps``. Without ``--before`` only
this checkout is measured.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import REPO, alternate, machine_note, write_results

TICK = os.sysconf("SC_CLK_TCK")
#: the trainer lease's settle time on a remote store (burst.lease.DEFAULT_SETTLE_S; 0.2 s on
#: the local one): the ``settle2_`` figures are a fresh start that waits it, as on S3
REMOTE_SETTLE_S = 2.0
FIRST_STEP = "train.first_step"
WATCHERS = "preemption watchers"


def _spec(tree: Path, work: Path) -> Path:
    text = (tree / "examples" / "quickstart.yaml").read_text()
    text = text.replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{work}/store"
    )
    spec = work / "quickstart.yaml"
    spec.write_text(text)
    return spec


def _env(tree: Path, extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURST_")}
    env["PYTHONPATH"] = str(tree)
    return {**env, **extra}


def _argv(tree: Path, work: Path, run_id: str) -> list[str]:
    spec = _spec(tree, work)
    return [
        sys.executable,
        "-m",
        "burst.steps.train",
        "--spec",
        str(spec),
        "--run-id",
        run_id,
        "--runs-root",
        str(work / "runs"),
    ]


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def cold_start(
    tree: Path,
    work: Path | None = None,
    run_id: str = "cold",
    prefix: str = "",
    extra: dict[str, str] | None = None,
) -> dict[str, float]:
    """One fresh train process: wall and CPU seconds to its first step; then it is stopped.
    ``work``: a scratch directory whose run ``run_id`` has a checkpoint (a restart)."""
    with tempfile.TemporaryDirectory(prefix="coldstart-") as tmp:
        work = work or Path(tmp)
        env = _env(tree, {"BURST_STEP_PACE_S": "5", **(extra or {})})
        t0 = time.monotonic()
        proc = subprocess.Popen(
            _argv(tree, work, run_id),
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        out: dict[str, float] = {}
        try:
            for line in proc.stderr:
                if WATCHERS in line and f"{prefix}start_to_watchers_s" not in out:
                    out[f"{prefix}start_to_watchers_s"] = round(time.monotonic() - t0, 3)
                if FIRST_STEP in line:
                    out[f"{prefix}start_to_first_step_s"] = round(time.monotonic() - t0, 3)
                    out[f"{prefix}cpu_to_first_step_s"] = round(_cpu(proc.pid), 3)
                    break
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.communicate()
        if f"{prefix}cpu_to_first_step_s" not in out:
            sys.exit(f"coldstart: {tree}: the train step ended before its first step")
        return out


def save_to_exit(tree: Path) -> dict[str, float]:
    """A notice after step 3: seconds from the emergency save's commit to the exit (wall),
    and the CPU seconds the process spent after its last line (the step's error line, as
    ``main`` returns) until it ended."""
    with tempfile.TemporaryDirectory(prefix="coldstart-") as tmp:
        work = Path(tmp)
        env = _env(tree, {"BURST_STEP_PACE_S": "0.2", "BURST_PREEMPT_AT_STEPS": "3"})
        proc = subprocess.Popen(
            _argv(tree, work, "exit"),
            cwd=tree,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert proc.stderr is not None
        at_line: float | None = None
        tail: list[str] = []
        for line in proc.stderr:
            tail = [*tail[-20:], line]
            if line.startswith("burst train: error:"):
                at_line = _cpu(proc.pid)
        _pid, status, usage = os.wait4(proc.pid, 0)
        ended = time.time()
        proc.returncode = os.waitstatus_to_exitcode(status)
        code = proc.returncode
        if code != 75 or at_line is None:
            sys.exit(f"coldstart: {tree}: exit {code}, not 75:\n{''.join(tail)}")
        rec = json.loads(
            (work / "runs" / "exit" / "train-attempts.jsonl").read_text().splitlines()[-1]
        )
        committed = float(rec["emergency_save"]["committed_at"])
        restart = cold_start(tree, work, "exit", "restart_")  # resumes from that save
        return {
            "save_to_exit_s": round(ended - committed, 3),
            "cpu_after_last_line_s": round(usage.ru_utime + usage.ru_stime - at_line, 3),
            **restart,
        }


def imports(tree: Path) -> dict[str, Any]:
    """``-X importtime`` of the train step up to its end (30 steps, unpaced)."""
    with tempfile.TemporaryDirectory(prefix="coldstart-") as tmp:
        work = Path(tmp)
        argv = _argv(tree, work, "imports")
        proc = subprocess.run(
            [argv[0], "-X", "importtime", *argv[1:]],
            cwd=tree,
            env=_env(tree, {}),
            capture_output=True,
            text=True,
        )
    rows = [
        m.groups()
        for m in re.finditer(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)", proc.stderr)
    ]
    top = sorted(((int(c), name) for _s, c, ind, name in rows if not ind), reverse=True)
    return {
        "modules": len(rows),
        "torch_submodules": sum(1 for *_x, n in rows if n == "torch" or n.startswith("torch.")),
        "top_level_cumulative_s": {name: round(us / 1e6, 3) for us, name in top[:10]},
    }


def _med(rows: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


def measure(tree: Path) -> dict[str, float]:
    remote = {"BURST_LEASE_SETTLE_S": str(REMOTE_SETTLE_S)}
    return {
        **cold_start(tree),
        **save_to_exit(tree),
        **cold_start(tree, prefix="settle2_", extra=remote),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, help="a tree of the code before the change")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results" / "coldstart.json"))
    args = ap.parse_args()
    sides = (
        {"after": REPO} if args.before is None else {"before": args.before.resolve(), "after": REPO}
    )
    doc: dict[str, Any] = {
        "benchmark": "coldstart",
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": machine_note(),
        "command": "python benchmarks/coldstart.py " + " ".join(sys.argv[1:]),
        "train_command": "python -m burst.steps.train --spec <quickstart.yaml, store in a "
        "scratch dir> --run-id ID --runs-root DIR (PYTHONPATH=<tree>, cwd <tree>)",
        "reps": args.reps,
    }
    for tree in sides.values():  # warm-up: .pyc files and the page cache, both sides
        measure(tree)
    trees = list(sides.values())
    if len(trees) == 2:
        a, b = alternate(
            args.reps,
            lambda: measure(trees[0]),
            lambda: measure(trees[1]),
            after_rep=lambda i, a, b: print(
                f"rep {i + 1}: before {a[-1]} after {b[-1]}", file=sys.stderr
            ),
        )
        runs = {"before": a, "after": b}
    else:
        runs = {"after": [measure(trees[0]) for _ in range(args.reps)]}
    for name, tree in sides.items():
        doc[name] = {"median": _med(runs[name]), "runs": runs[name], "imports": imports(tree)}
    if "before" in doc:
        doc["change"] = {
            k: round(doc["after"]["median"][k] - doc["before"]["median"][k], 3)
            for k in doc["after"]["median"]
        }
    doc["load_average_after"] = round(os.getloadavg()[0], 2)
    write_results(args.out, doc)
    print(json.dumps({k: doc[k] for k in doc if k in ("before", "after", "change")}, indent=1))


if __name__ == "__main__":
    main()
