"""Many-rank trials by hand (issue 18's Done-when counts; the test suite runs a few).

    python scripts/rank_trials.py preempt --world 2 --trials 6 --seed 100
    python scripts/rank_trials.py kill --world 2 --trials 20 --seed 200
    python scripts/rank_trials.py reshard --world 4 --to 2 --trials 1 --seed 400
    python scripts/rank_trials.py preempt --engine fsdp2 --world 2 --trials 5 --seed 900

``preempt``: each trial preempts a run at a random step with the notice (SIGTERM) delivered to
one random rank only, resumes it, and compares its final weights with the uninterrupted run's.
``kill``: each trial SIGKILLs one random rank at a random moment, or one rank's checkpoint
worker at a random named point of a random save (fault points), then checks that every
visible checkpoint restores completely and how long the step took to stop.
Every trial prints one JSON line with its seed (re-run one with --seed S --trials 1).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests" / "train")]

from ranks_helpers import (  # noqa: E402
    doc,
    kill_rank_during_training,
    ranks_spec,
    train,
)

from burst.checkpoint import CheckpointManager, list_checkpoints  # noqa: E402
from burst.checkpoint.dtensor_parts import rank_parts, whole_state  # noqa: E402
from burst.checkpoint.sharded import assemble  # noqa: E402
from burst.storage import open_store  # noqa: E402

STEPS = 20
POINTS = ("chunk-uploaded", "shard-written", "before-global", "after-global")


def whole(state: Any) -> Any:
    """A restored checkpoint as one state, whichever engine saved it (DDP or FSDP2)."""
    return whole_state(state) if rank_parts(state) is not None else assemble(state)


def visible_checkpoints_complete(store_url: str) -> list[int]:
    store = open_store(store_url)
    mgr = CheckpointManager(store)
    try:
        steps = []
        for ref in list_checkpoints(store):
            state = whole(mgr.restore(ref.step, tier=ref.tier).state)
            assert state["step"] == ref.step, ref
            steps.append(ref.step)
        return steps
    finally:
        mgr.close()


def preempt(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    spec = ranks_spec(tmp, "spec", processes=args.world, steps=STEPS, engine=args.engine)
    base = train(spec, "plain", tmp / "runs", timeout=900)
    assert base.returncode == 0, base.stderr[-2000:]
    want = doc(tmp / "runs", "plain")["final_weights_sha256"]
    out = []
    for i in range(args.trials):
        seed = args.seed + i
        rng = random.Random(seed)
        at, rank = rng.randrange(1, STEPS), rng.randrange(args.world)
        env = {"BURST_PREEMPT_AT_STEPS": str(at), "BURST_PREEMPT_RANK": str(rank)}
        run_id = f"pre-{seed}"
        t0 = time.monotonic()
        first = train(spec, run_id, tmp / "runs", timeout=900, **env)
        d1 = doc(tmp / "runs", run_id)
        second = train(spec, run_id, tmp / "runs", timeout=900, **env)
        d2 = doc(tmp / "runs", run_id)
        row = {
            "mode": "preempt",
            "world": args.world,
            "seed": seed,
            "step": at,
            "notice_rank": rank,
            "first_exit": first.returncode,
            "second_exit": second.returncode,
            "notice_to_exit_s": d1.get("notice_to_exit_s"),
            "emergency": (d1["attempts"][0].get("emergency_save") or {}).get("tier"),
            "identical": d2.get("final_weights_sha256") == want,
            "seconds": round(time.monotonic() - t0, 1),
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def kill(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    spec = ranks_spec(tmp, "spec", processes=args.world, steps=STEPS, engine=args.engine)
    out = []
    for i in range(args.trials):
        seed = args.seed + i
        rng = random.Random(seed)
        rank = rng.randrange(args.world)
        run_id = f"kill-{seed}"
        row: dict[str, Any] = {"mode": "kill", "world": args.world, "seed": seed, "rank": rank}
        if rng.random() < 0.5:
            after = rng.uniform(0.0, 2.0)  # after the first commit: training under way
            code, err, took = kill_rank_during_training(
                spec,
                run_id,
                tmp / "runs",
                rank=rank,
                after_s=after,
                timeout=900,
                store=tmp / "store" / run_id,
            )
            row.update(what="rank", after_s=round(after, 2), stop_s=round(took, 2))
        else:
            point, nth = rng.choice(POINTS), rng.randint(1, 3)
            env = {
                "BURST_CHECKPOINT_FAULT": f"{point}:{nth}",
                "BURST_CHECKPOINT_FAULT_RANK": str(rank),
            }
            p = train(spec, run_id, tmp / "runs", timeout=900, **env)
            code, err = p.returncode, p.stderr
            row.update(what="worker", point=f"{point}:{nth}")
        row["exit"] = code
        row["last_line"] = err.strip().splitlines()[-1][:300] if err.strip() else ""
        row["traceback"] = "Traceback" in err
        try:
            row["visible"] = visible_checkpoints_complete(f"file://{tmp}/store/{run_id}")
            row["complete"] = True
        except Exception as exc:  # reported, not raised: the trial's finding
            row.update(complete=False, error=f"{type(exc).__name__}: {exc}")
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def eval_loss(store_url: str, step: int, seed: int) -> tuple[float, int]:
    """Full-dataset MSE (eval mode) of the model in the full checkpoint of ``step``, and the
    samples it had consumed."""
    import torch

    from burst.train.example import SmallMLP, make_dataset

    mgr = CheckpointManager(open_store(store_url))
    try:
        state = whole(mgr.restore(step, tier="full").state)
    finally:
        mgr.close()
    model = SmallMLP()
    model.load_state_dict(state["model"])
    model.eval()
    x, y = make_dataset(seed)
    with torch.no_grad():
        loss = float(torch.nn.functional.mse_loss(model(x), y))
    return loss, int(state.get("samples") or 0)


def reshard(args: argparse.Namespace, tmp: Path) -> list[dict[str, Any]]:
    """Saved by --world ranks at a random step, resumed by --to ranks; compared with the
    uninterrupted run of --world ranks and of --to ranks (full-dataset loss at the end)."""
    out = []
    specs = {
        w: ranks_spec(tmp, f"w{w}", processes=w, steps=STEPS, engine=args.engine)
        for w in (args.world, args.to)
    }
    ref: dict[int, float] = {}
    for w, spec in specs.items():
        p = train(spec, f"plain-{w}", tmp / "runs", timeout=900)
        assert p.returncode == 0, p.stderr[-2000:]
        ref[w] = eval_loss(f"file://{tmp}/store/plain-{w}", STEPS, 1234)[0]
    for i in range(args.trials):
        seed = args.seed + i
        at = random.Random(seed).randrange(2, STEPS - 1)
        run_id = f"reshard-{seed}"
        first = train(
            specs[args.world], run_id, tmp / "runs", timeout=900, BURST_PREEMPT_AT_STEPS=str(at)
        )
        second = train(specs[args.to], run_id, tmp / "runs", timeout=900)
        d = doc(tmp / "runs", run_id)
        loss, samples = eval_loss(f"file://{tmp}/store/{run_id}", STEPS, 1234)
        want_samples = 32 * (at * args.world + (STEPS - at) * args.to)
        row = {
            "mode": "reshard",
            "from": args.world,
            "to": args.to,
            "seed": seed,
            "step": at,
            "exits": [first.returncode, second.returncode],
            "resumed_from": [a["resumed_from"] for a in d["attempts"]],
            "samples": samples,
            "samples_expected": want_samples,
            "eval_loss": round(loss, 6),
            f"eval_loss_uninterrupted_{args.world}": round(ref[args.world], 6),
            f"eval_loss_uninterrupted_{args.to}": round(ref[args.to], 6),
            "identical": samples == want_samples and second.returncode == 0,
        }
        print(json.dumps(row), flush=True)
        out.append(row)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("preempt", "kill", "reshard"))
    p.add_argument("--to", type=int, default=2, help="reshard: the world size resumed on")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--engine", choices=("torch", "fsdp2"), default="torch")
    p.add_argument("--trials", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="rank-trials-"))
    try:
        modes = {"preempt": preempt, "kill": kill, "reshard": reshard}
        rows = modes[args.mode](args, tmp)
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    bad = [
        r for r in rows if not (r.get("identical") or (r["mode"] == "kill" and r.get("complete")))
    ]
    print(json.dumps({"trials": len(rows), "failed": len(bad)}))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
