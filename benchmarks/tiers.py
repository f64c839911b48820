"""Checkpoint tiers: a 4-rank run loses one rank's node; that rank restores from a surviving
peer's memory, against the object store, side by side.

    python benchmarks/tiers.py [--mib 192] [--reps 5] [--ranks 4] [--lost 2] [--quick] [--out FILE]

The setup of issue 45. Four "nodes", each a rank process plus its own peer memory server
(``burst.checkpoint.peer``, a process of its own), paired as ``burst.train.tiers.rank_tiers``
pairs them: rank r writes to its node's server (``local``), then to node r+1's (``peer``),
and the loopback S3 server (``rclone serve s3``) is the store. Each rank saves one checkpoint
of --mib MiB of random float32 (seeded by its rank, nothing deduplicates; a few tensors, as a
model's) to both tiers, through its manager and worker, all four at once, then holds its
state in memory. Then rank --lost's node is lost: its rank process and its local server are
SIGKILLed together. A new node (an empty peer server) takes its place, and the rank restores
in a fresh process, A and B alternated (``harness.alternate``), after one warm-up pair:

* A: ``CheckpointManager(store, local=<the new node's empty server>, peers=[<node r+1's>])``,
  which must restore from the peer (``Restored.source == "peer"``);
* B: ``CheckpointManager(store)`` with no memory tiers: the object store.

Each restoring process does what a resumed rank of the train loop does before its restore
(burst/train/loop.py): it builds its manager and uses the store (the attempt's lease: a
client, a connection), then builds its model (here: zero tensors of the state's shapes, their
memory touched), then restores into them in place (``restore(into=...)``, as the DDP
engine's ``restore_split(into=live)``). That restore is timed (the listings of every tier,
the reads, and the verification of every chunk: the restore loop's whole work), and the
state is then checked bit for bit against the rank's seeded state, in place. Reported: each
side's median, the ratio peer / store (``peer_over_store``; goal of issue 45: at most 0.3),
the same ratio with the manager's construction and first use of the store counted
(``cold_peer_over_store``: a restore that is its process's first use of the store, which
builds a botocore client on either side), and the load average at start and end (the
machine is shared; benchmarks run under ``flock /tmp/bench.lock``).

Why 192 MiB per rank by default: four ranks' states, their staging buffers and workers, and
two copies of each in the peer servers (local and peer) are about 4 x 5 x 192 MiB = 3.8 GiB
on a machine with 2 cores and 23 GiB, and the four saves at once take tens of seconds
there. Both sides read the same bytes and verify them the same way; what does not grow with
the state (the listings, a manifest, the threads' connections) weighs more in a smaller one,
so the ratio falls as the state grows (``--quick``, 32 MiB, shows the other end; a real
rank's state is GiBs). What this is not: a
network. On loopback the store is a local process too (a real object store over a
cross-region link is slower), and the peer on a node network a little slower than loopback.
Writes benchmarks/results/tiers.json (--out).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    REPO,
    alternate,
    goals_text,
    loopback_s3,
    machine_note,
    median,
    meets_goals,
    write_results,
)

GOALS = {"peer_over_store": ("<=", 0.3)}
#: tensors per rank's state (a model's few large parameters and their optimizer state)
PIECES = 4


def rank_state(rank: int, mib: int, *, empty: bool = False) -> dict[str, Any]:
    """Rank ``rank``'s state: ``mib`` MiB of seeded random float32 in PIECES tensors (zeros
    with ``empty``: a resumed rank's freshly built model, its memory touched)."""
    import torch

    g = torch.Generator().manual_seed(1000 + rank)
    each = (mib << 18) // PIECES

    def make(n: int) -> torch.Tensor:
        return torch.zeros(n) if empty else torch.randn(n, generator=g)

    state: dict[str, Any] = {f"w{i}": make(each) for i in range(PIECES)}
    state["b"] = make(7)
    state["step"] = 1
    return state


def store_url(rank: int) -> str:
    return f"s3://bench/tiers/rank-{rank}"


def run_rank(args: argparse.Namespace) -> int:
    """``--rank-run save``: save this rank's state to its tiers and the store, say so, hold it
    until stdin closes (or SIGKILL). ``--rank-run restore``: restore, time, check, report."""
    import torch

    from burst.checkpoint import CheckpointManager

    if args.rank_run == "save":
        state = rank_state(args.rank, args.mib)
        with CheckpointManager(store_url(args.rank), local=args.local, peers=args.peer) as mgr:
            mgr.save(1, state)
            result = mgr.wait(900)
            assert result is not None and result.extra.get("store") is True, result
            print(json.dumps({"saved": args.rank, "tiers": result.extra.get("tiers")}), flush=True)
            sys.stdin.read()  # the node lives until the benchmark ends or kills it
        return 0
    # As in the train loop (burst/train/loop.py): the manager first, and the store in use
    # (the attempt's lease is taken on it) before the model is built; then the model's and
    # optimizer's tensors exist, and the restore fills them in place (``into=``). So neither
    # side's time holds the store client's construction (about 0.17 s of botocore here).
    t_cold = time.perf_counter()
    mgr = CheckpointManager(
        store_url(args.rank), local=args.local, peers=args.peer, start_worker=False
    )
    try:
        mgr.store.exists("leases/bench")  # the lease's round trip: a client, a connection
        cold = time.perf_counter() - t_cold
        live = rank_state(args.rank, args.mib, empty=True)
        t0 = time.perf_counter()
        got = mgr.restore(into=live)
        seconds = time.perf_counter() - t0
    finally:
        mgr.close()
    want = rank_state(args.rank, args.mib)
    same = set(got.state) == set(want) and all(
        torch.equal(got.state[k].view(torch.int32), want[k].view(torch.int32))
        if isinstance(want[k], torch.Tensor)
        else got.state[k] == want[k]
        for k in want
    )
    in_place = all(got.state[k] is live[k] for k in want if isinstance(want[k], torch.Tensor))
    report = {"seconds": seconds, "client_seconds": cold, "source": got.source}
    print(json.dumps({**report, "same": same and in_place, "step": got.step}))
    return 0


def restore_seconds(
    rank: int, mib: int, local: str | None, peer: str | None, expect: str
) -> tuple[float, float]:
    """One restore of ``rank`` in a fresh process: its seconds, and those of its manager's
    construction and first use of the store before it (checked: source, bits)."""
    cmd = [sys.executable, __file__, "--rank-run", "restore", "--rank", str(rank)]
    cmd += ["--mib", str(mib)]
    cmd += [*(["--local", local] if local else []), *(["--peer", peer] if peer else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"the restore from {expect} failed:\n{proc.stderr[-2000:]}")
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    if report["source"] != expect:
        raise SystemExit(f"restored from {report['source']}, expected {expect}")
    if not report["same"] or report["step"] != 1:
        raise SystemExit(f"the restore from {expect} is not bit-identical to the saved state")
    return float(report["seconds"]), float(report["client_seconds"])


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mib", type=int, default=192, help="state per rank (MiB)")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--lost", type=int, default=2, help="the rank whose node is lost")
    ap.add_argument("--quick", action="store_true", help="32 MiB per rank, 2 repetitions")
    ap.add_argument("--out", type=Path, default=REPO / "benchmarks/results/tiers.json")
    ap.add_argument("--rank-run", choices=("save", "restore"), help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--local", help=argparse.SUPPRESS)
    ap.add_argument("--peer", action="append", default=[], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rank_run:
        return run_rank(args)
    from burst.checkpoint.peer import start_peer

    mib, reps = (32, 2) if args.quick else (args.mib, args.reps)
    world, lost = args.ranks, args.lost
    if world < 2 or not 0 <= lost < world:
        raise SystemExit(f"--ranks {world} --lost {lost}: need 2+ ranks and a rank among them")
    note = machine_note()
    load_start = os.getloadavg()
    capacity = 2 * (mib << 20) + (64 << 20)  # its own rank's copy and the previous node's
    servers: list[subprocess.Popen[str]] = []
    ranks: list[subprocess.Popen[str]] = []
    with (
        tempfile.TemporaryDirectory(prefix="burst-bench-") as tmp,
        loopback_s3(Path(tmp) / "s3") as server,
    ):
        server.create_bucket("bench")
        try:
            nodes = []
            for _ in range(world):
                proc, address = start_peer(capacity)
                servers.append(proc)
                nodes.append(address)
            t0 = time.perf_counter()
            for r in range(world):
                cmd = [sys.executable, __file__, "--rank-run", "save", "--rank", str(r)]
                cmd += ["--mib", str(mib), "--local", nodes[r], "--peer", nodes[(r + 1) % world]]
                ranks.append(
                    subprocess.Popen(
                        cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=_env()
                    )
                )
            for r, proc in enumerate(ranks):
                assert proc.stdout is not None
                line = proc.stdout.readline()
                if not line:
                    raise SystemExit(f"rank {r} did not save (exit code {proc.wait()})")
                print(f"rank {r} saved: {json.loads(line)['tiers']}", file=sys.stderr)
            save_s = time.perf_counter() - t0
            # rank `lost`'s node is lost: its process and its memory, at once
            for proc in (ranks[lost], servers[lost]):
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
            fresh_proc, fresh = start_peer(capacity)  # the new node: empty memory
            servers.append(fresh_proc)
            peer = nodes[(lost + 1) % world]
            peer_runs, store_runs = alternate(
                reps,
                lambda: restore_seconds(lost, mib, fresh, peer, "peer"),
                lambda: restore_seconds(lost, mib, None, None, "store"),
                warmup=1,
                after_rep=lambda rep, a, b: print(
                    f"rep {rep}: peer {a[-1][0]:.3f} s, store {b[-1][0]:.3f} s", file=sys.stderr
                ),
            )
        finally:
            for proc in ranks:
                if proc.stdin is not None and proc.poll() is None:
                    proc.stdin.close()
            for proc in ranks:
                try:
                    proc.wait(timeout=120)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
            for proc in servers:
                proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
    load_end = os.getloadavg()
    peer_s, store_s = [r[0] for r in peer_runs], [r[0] for r in store_runs]
    row: dict[str, Any] = {
        "restore_peer_s": round(median(peer_s), 4),
        "restore_store_s": round(median(store_s), 4),
    }
    row["peer_over_store"] = round(row["restore_peer_s"] / row["restore_store_s"], 3)
    # the same restores with the manager's construction and first use of the store (its
    # client) counted: a restore that is the process's first use of the store
    row["cold_peer_over_store"] = round(
        median(sum(r) for r in peer_runs) / median(sum(r) for r in store_runs), 3
    )
    doc = {
        "benchmark": (
            f"checkpoint tiers: {world} ranks, rank {lost}'s node lost (process and memory "
            "SIGKILLed), restored in a fresh process from the surviving peer's memory vs the "
            "object store (loopback rclone serve s3), alternated"
        ),
        "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": note,
        "load_average": {
            "start": [round(x, 2) for x in load_start],
            "end": [round(x, 2) for x in load_end],
        },
        "ranks": world,
        "lost_rank": lost,
        "state_mib_per_rank": mib,
        "save_all_ranks_s": round(save_s, 2),
        "repetitions": reps,
        "results": row,
        "reps": {
            "restore_peer_s": peer_s,
            "restore_store_s": store_s,
            "client_peer_s": [r[1] for r in peer_runs],
            "client_store_s": [r[1] for r in store_runs],
        },
        "goals": goals_text(GOALS),
        "meets": meets_goals(row, GOALS),
    }
    write_results(args.out, doc)
    print(doc["results"], doc["meets"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
