"""What every benchmark here shares: A/B alternation, medians, goals, the machine note, JSON
results, a loopback S3 server in the environment, and torchrun ranks on CPU.

    from harness import REPO, alternate, median, meets_goals, torchrun_ranks, write_results

The benchmarks (checkpoint.py, preemption.py, sharded.py, fsdp2.py, regional.py) keep their own
measurements and their own result documents; only the mechanics live here, once:

* ``ab_order(rep)``: "AB" on even repetitions, "BA" on odd ones, so neither side always runs
  first (a warm cache, a busy neighbour); ``alternate`` runs two callables that way and
  returns both sides' results, after ``warmup`` repetitions whose results are dropped.
* ``median``: of at least one value, as a float.
* ``cpu_seconds``: this process's CPU-seconds so far (every thread), reported beside wall times.
* ``goals_text`` / ``meets_goals``: goals written ``{name: (op, bound)}`` with op ``<=``/``>=``.
* ``machine_note``: cores and load average at start (the machines are shared: say so).
* ``write_results``: the JSON document, indented, newline-terminated, parents created.
* ``loopback_s3``: ``rclone serve s3`` on loopback, its credentials in ``os.environ`` while it
  runs (boto3 and child processes find them), restored afterwards.
* ``torchrun_ranks``: ``python -m torch.distributed.run --standalone`` with W ranks running
  ``script --rank-run --work DIR --result FILE ARGS...`` on gloo; rank 0 writes FILE; the
  parsed result comes back and DIR is removed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

T = TypeVar("T")
U = TypeVar("U")
Goals = Mapping[str, tuple[str, float]]


def ab_order(rep: int) -> str:
    """The order of the two sides in repetition ``rep``: "AB", then "BA", alternately."""
    return "AB" if rep % 2 == 0 else "BA"


def alternate(
    reps: int,
    run_a: Callable[[], T],
    run_b: Callable[[], U],
    *,
    warmup: int = 0,
    after_rep: Callable[[int, list[T], list[U]], None] | None = None,
) -> tuple[list[T], list[U]]:
    """``warmup + reps`` repetitions of A and B in alternating order (``ab_order``); the
    results of the repetitions after the warm-up, per side. ``after_rep(rep, a, b)`` is called
    after each counted repetition (for a log line)."""
    a: list[T] = []
    b: list[U] = []
    for rep in range(warmup + reps):
        for side in ab_order(rep):
            result = run_a() if side == "A" else run_b()
            if rep >= warmup:
                (a if side == "A" else b).append(result)  # type: ignore[arg-type]
        if rep >= warmup and after_rep is not None:
            after_rep(rep - warmup, a, b)
    return a, b


def cpu_seconds() -> float:
    """CPU-seconds (user + system) this process has used, every thread counted: a figure
    much less sensitive than wall time to the other jobs on a shared machine."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def median(xs: Iterable[float]) -> float:
    return float(statistics.median(list(xs)))


def goals_text(goals: Goals) -> dict[str, str]:
    return {k: f"{op} {bound}" for k, (op, bound) in goals.items()}


def meets_goals(row: Mapping[str, Any], goals: Goals) -> dict[str, bool]:
    out = {}
    for k, (op, bound) in goals.items():
        if op not in ("<=", ">="):
            raise ValueError(f"goal {k}: op {op!r} is not <= or >=")
        out[k] = bool(row[k] <= bound if op == "<=" else row[k] >= bound)
    return out


def machine_note() -> str:
    return f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start"


def write_results(path: str | Path, doc: Mapping[str, Any]) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


@contextmanager
def loopback_s3(root: Path) -> Iterator[Any]:
    """A running ``LoopbackS3`` (burst.storage.loopback) with its client settings in
    ``os.environ`` until the block ends."""
    from burst.storage.loopback import LoopbackS3

    server = LoopbackS3(root).start()
    saved = {k: os.environ.get(k) for k in server.client_env()}
    os.environ.update(server.client_env())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def torchrun_ranks(
    script: str | Path, world: int, args: Sequence[str], *, prefix: str = "bench-"
) -> dict[str, Any]:
    """Run ``script`` as ``world`` torchrun ranks on this machine (gloo, one thread each) and
    return what rank 0 wrote to ``--result``."""
    work = Path(tempfile.mkdtemp(prefix=f"{prefix}{world}-"))
    try:
        result = work / "result.json"
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc-per-node={world}", str(script), "--rank-run", *args]
        cmd += ["--work", str(work), "--result", str(result)]
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        subprocess.run(cmd, check=True, env=env)
        return dict(json.loads(result.read_text()))
    finally:
        shutil.rmtree(work, ignore_errors=True)
