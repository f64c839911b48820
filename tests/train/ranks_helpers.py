"""Helpers of the many-rank tests and of scripts/rank_trials.py: a spec with N ranks, the
train step run for real (torchrun ranks on CPU with gloo), its document, its checkpoints."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
STEP = (sys.executable, "-m", "burst.steps.train")


def ranks_spec(
    tmp: Path,
    name: str,
    *,
    processes: int,
    steps: int = 20,
    nodes: int = 1,
    seed: int = 1234,
    engine: str = "torch",
) -> Path:
    """The quickstart with ``processes`` ranks per node and ``engine``, its store in
    ``tmp/store``."""
    text = QUICKSTART.read_text()
    old_store = "checkpoint_uri: file://checkpoints"
    old_steps = "  steps: 30\n  seed: 1234\n"
    assert old_store in text and old_steps in text
    text = text.replace(old_store, f"checkpoint_uri: file://{tmp}/store")
    text = text.replace(
        old_steps,
        f"  steps: {steps}\n  seed: {seed}\n  nodes: {nodes}\n  processes_per_node: {processes}\n"
        f"  engine: {engine}\n",
    )
    path = tmp / f"{name}.yaml"
    path.write_text(text)
    return path


def step_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("BURST_")}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env


def train(
    spec: Path, run_id: str, runs: Path, *, timeout: float = 240, **env: str
) -> subprocess.CompletedProcess[str]:
    """``python -m burst.steps.train`` as the pipeline runs it (it starts torchrun itself)."""
    return subprocess.run(
        [*STEP, "--spec", str(spec), "--run-id", run_id, "--runs-root", str(runs)],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env=step_env(**env),
    )


def doc(runs: Path, run_id: str) -> dict[str, Any]:
    return json.loads((runs / run_id / "docs" / "train.json").read_text())  # type: ignore[no-any-return]


def rank_pids(parent: int) -> dict[int, int]:
    """{rank: pid} of the ranks below ``parent`` (their environment names their RANK)."""
    found: dict[int, int] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            env = (proc / "environ").read_bytes().split(b"\0")
            cmdline = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        vars_ = dict(e.split(b"=", 1) for e in env if b"=" in e)
        if b"LOCAL_RANK" not in vars_ or vars_.get(b"BURST_TEST_PARENT") != str(parent).encode():
            continue
        if b"burst.checkpoint.worker" in cmdline:
            continue
        found[int(vars_[b"RANK"])] = int(proc.name)
    return found


def kill_rank_during_training(
    spec: Path,
    run_id: str,
    runs: Path,
    *,
    rank: int,
    after_s: float,
    timeout: float = 240,
    store: Path | None = None,
    env: dict[str, str] | None = None,
) -> tuple[int, str, float]:
    """Start the step, SIGKILL one rank ``after_s`` seconds after the ranks exist (or, with
    ``store``, after the first checkpoint committed there: training is under way); return
    (exit code, stderr, seconds from the kill to the step's exit)."""
    marker = str(os.getpid())
    proc = subprocess.Popen(
        [*STEP, "--spec", str(spec), "--run-id", run_id, "--runs-root", str(runs)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env=step_env(BURST_TEST_PARENT=marker, **(env or {})),
    )
    deadline = time.monotonic() + 120
    pids: dict[int, int] = {}
    while time.monotonic() < deadline and rank not in pids:
        time.sleep(0.2)
        pids = rank_pids(int(marker))
    assert rank in pids, "the ranks did not start"
    while store is not None and time.monotonic() < deadline and proc.poll() is None:
        if (store / "latest.json").exists():
            break
        time.sleep(0.05)
    time.sleep(after_s)
    killed_at = time.monotonic()
    with contextlib.suppress(ProcessLookupError):
        os.kill(pids[rank], signal.SIGKILL)
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err, time.monotonic() - killed_at


def replay_losses(spec: Path, worlds: list[int]) -> list[float]:
    """Rank 0's loss at each step of a data-parallel run of ``spec`` whose step ``s`` ran on
    ``worlds[s]`` ranks, replayed in this one process: every rank's slice of the global batch
    (samples ``p + r*B .. p + (r+1)*B``) with that rank's dropout seed, the gradients averaged
    as DDP averages them, then the optimizer and scheduler step. What the real ranks do, up to
    the order of float sums (the all-reduce's against this loop's), with no world-size change
    or resume in it: the uninterrupted reference for a run resumed on another world size."""
    import torch

    from burst.spec import load_spec
    from burst.train.ranks import step_seed
    from burst.train.setup import build_setup

    job = load_spec(spec)
    setup = build_setup(job)
    assert setup.batch_for_samples is not None
    b, seed = job.training.batch_size, job.training.seed
    model, samples, out = setup.model, 0, []
    for step, world in enumerate(worlds):
        model.train()
        setup.optimizer.zero_grad(set_to_none=True)
        first = 0.0
        for r in range(world):
            torch.manual_seed(step_seed(seed, step, r))
            x, y = setup.batch_for_samples(samples + r * b, b)
            loss = setup.loss_fn(model(x), y)
            (loss / world).backward()
            if r == 0:
                first = float(loss.detach())
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        samples += world * b
        out.append(first)
    return out


#: A resumed run's per-step loss against ``replay_losses``: within this relative gap (the
#: order of float sums; a data position or optimizer moment off moves it by percents).
RTOL = 1e-4


def relative_gap(curve: list[float], ref: list[float]) -> float:
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(curve, ref, strict=True))


def check_loss_curve(
    d: dict[str, Any], spec: Path, before: int, after: int, at: int, why: str
) -> None:
    """Rank 0's per-step losses of a run that went from ``before`` to ``after`` ranks at step
    ``at`` (its document ``d``, two attempts) against ``replay_losses`` of that schedule: each
    part within ``RTOL``; the gaps are printed with ``why`` (the seed)."""
    curve = d["attempts"][0]["losses"] + d["attempts"][1]["losses"]
    steps = len(curve)
    assert steps == at + len(d["attempts"][1]["losses"]) and steps > at
    ref = replay_losses(spec, [before] * at + [after] * (steps - at))
    gap_before = relative_gap(curve[:at], ref[:at])
    gap_after = relative_gap(curve[at:], ref[at:])
    print(
        f"{why}, {before} -> {after} ranks at step {at}: relative gap {gap_before:.2e} "
        f"before, {gap_after:.2e} after"
    )
    assert gap_before <= RTOL, f"{why}: the uninterrupted part is off the reference"
    assert gap_after <= RTOL, f"{why} step {at}: {curve[at:]} vs {ref[at:]}"
