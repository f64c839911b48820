"""Start the train step's ranks under torchrun, and turn their exits into the step's one exit.

``python -m burst.steps.train`` with ``training.nodes x training.processes_per_node`` > 1, when it
is not itself a rank (no ``LOCAL_RANK``), runs
``python -m torch.distributed.run ... -m burst.steps.train <the same arguments>`` and waits:

* with the local runner (``burst run``), every rank on this machine (``--standalone``);
* in a gang pod of the multi-node path (``BURST_GANG=1``; Volcano sets ``WORLD_SIZE`` to the
  nodes, ``RANK`` to this node's index, ``MASTER_ADDR``/``MASTER_PORT``), this node's
  ``BURST_NPROC_PER_NODE`` ranks joining the others' (``--nnodes``, ``--node-rank``,
  ``--master-addr``, ``--master-port``).

With ``training.checkpoint.memory_tiers`` the step also gives the ranks their peer memory
servers (``burst.train.tiers``): here one process per node, stopped with the step; in a gang
pod the pods' sidecars.

torchrun reports any failed rank as exit 1, which would hide a preemption (75) from the retry
policy. So each rank records its exit code in ``BURST_RANK_EXIT_DIR`` (and rank 0 its step
document); the step exits with the ranks' agreed code: 75 when they stopped on a notice (or
a peer died: requeue from the last committed checkpoint), else the first other failure. A
rank that left no record was killed (SIGKILL, node loss): exit 75, saying which.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from burst.errors import EXIT_PREEMPTED, BurstError
from burst.preempt.signals import take_caught
from burst.settings import current
from burst.spec import BurstJob
from burst.stepio import RANK_DOC, RANK_EXIT_DIR_ENV, StepContext
from burst.train.tiers import gang_addresses, local_servers

log = logging.getLogger(__name__)


def wanted(job: BurstJob, env: dict[str, str]) -> bool:
    """Whether this train step starts ranks (it is not one itself)."""
    if "LOCAL_RANK" in env or job.training.own_program:  # (a program's launcher is its own)
        return False
    return bool(current().gang) or job.training.world_size > 1


class RanksFailed(BurstError):
    """The ranks' agreed failure; ``exit_code`` is theirs."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def torchrun_args(job: BurstJob, env: dict[str, str]) -> tuple[list[str], list[int]]:
    """torchrun's options, and the global ranks that run on this node."""
    ppn = job.training.processes_per_node
    if current().gang:
        ppn = int(current().nproc_per_node or ppn)
        nodes = int(env.get("WORLD_SIZE", str(job.training.nodes)))
        node_rank = int(env.get("RANK", "0"))
        opts = [
            f"--nnodes={nodes}",
            f"--node-rank={node_rank}",
            f"--master-addr={env.get('MASTER_ADDR', '127.0.0.1')}",
            f"--master-port={env.get('MASTER_PORT', '29500')}",
            f"--nproc-per-node={ppn}",
        ]
        return opts, list(range(node_rank * ppn, (node_rank + 1) * ppn))
    world = job.training.world_size
    return ["--standalone", "--nnodes=1", f"--nproc-per-node={world}"], list(range(world))


def rank_argv(ctx: StepContext) -> list[str]:
    argv = ["--spec", str(ctx.spec_path), "--run-id", ctx.run_id]
    argv += ["--runs-root", str(ctx.paths.root)]
    for name, doc in ctx.inputs.items():
        argv += ["--input", f"{name}={json.dumps(doc.to_json())}"]
    return argv


def launch(ctx: StepContext, job: BurstJob) -> dict[str, Any]:
    env = dict(os.environ)
    opts, local_ranks = torchrun_args(job, env)
    base = ctx.paths.dir / "ranks"  # one directory per attempt: exit records, rank 0's doc
    base.mkdir(parents=True, exist_ok=True)
    exit_dir = Path(tempfile.mkdtemp(prefix="attempt-", dir=base))
    env[RANK_EXIT_DIR_ENV] = str(exit_dir)
    env.setdefault("OMP_NUM_THREADS", "1")
    cmd = [
        sys.executable,
        "-m",
        "burst.train.launch",  # torchrun (torch.distributed.run), minus its traceback
        *opts,
        "--max-restarts=0",
        "-m",
        "burst.steps.train",
        *rank_argv(ctx),
    ]
    with contextlib.ExitStack() as servers:
        if job.training.checkpoint.memory_tiers.enabled:
            # each node's peer memory server (burst.train.tiers): a gang pod's sidecars, or
            # here one process per node, stopped with this step
            if current().gang:
                env["BURST_PEER_ADDRESSES"] = ",".join(gang_addresses(env))
            else:
                servers.enter_context(local_servers(job, env))
        log.info("starting %d rank(s) here: %s", len(local_ranks), " ".join(cmd[2:]))
        return _run(cmd, env, exit_dir, local_ranks)


def _run(
    cmd: list[str], env: dict[str, str], exit_dir: Path, local_ranks: list[int]
) -> dict[str, Any]:
    """torchrun with ``cmd`` until the ranks end (a notice forwarded to it): ``conclude``."""
    proc = subprocess.Popen(cmd, env=env)

    def forward(signum: int, _frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signum)

    held = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    for signum, _at in take_caught():  # a notice while this step started goes on too
        forward(signum, None)
    try:
        code = proc.wait()
    finally:
        for s, h in held.items():
            signal.signal(s, h)
    return conclude(exit_dir, local_ranks, code)


def conclude(exit_dir: Path, local_ranks: list[int], launcher_code: int) -> dict[str, Any]:
    """The step's document and exit from what every rank recorded."""
    codes: dict[int, dict[str, Any]] = {}
    for r in local_ranks:
        path = exit_dir / f"rank-{r}.json"
        with contextlib.suppress(OSError, ValueError):
            codes[r] = json.loads(path.read_text())
    doc: dict[str, Any] | None = None
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads((exit_dir / RANK_DOC).read_text())
    missing = [r for r in local_ranks if r not in codes]
    failed = {r: c for r, c in codes.items() if int(c.get("exit_code", 1)) != 0}
    if not missing and not failed:
        # every rank finished (a rank killed after writing its record makes torchrun fail,
        # yet its work is done)
        if launcher_code != 0:
            log.warning("every rank finished; torchrun exited %d afterwards", launcher_code)
        return doc if doc is not None else {"ranks_here": local_ranks}
    root = {r: c for r, c in failed.items() if int(c.get("exit_code", 1)) != EXIT_PREEMPTED}
    if missing and not root:  # killed ranks and, at most, peers that stopped because of it
        others = "; ".join(f"rank {r}: {c.get('error')}" for r, c in sorted(failed.items()))
        exc = RanksFailed(
            f"rank(s) {','.join(map(str, missing))} of the train step left no exit record "
            f"(killed, node lost, or stopped by torchrun after a peer's death; torchrun exit "
            f"{launcher_code})"
            + (f"; the others stopped: {others}" if others else "")
            + "; the last committed checkpoint stands; exit 75 to requeue",
            EXIT_PREEMPTED,
        )
    else:  # the first rank that failed for its own reason (bad input, ...) names the cause
        by_code = sorted(failed.items(), key=lambda rc: (int(rc[1]["exit_code"]) == 75, rc[0]))
        rank, first = by_code[0]
        agreed = int(first["exit_code"])
        exc = RanksFailed(
            f"rank {rank}: {first.get('error') or f'exit {agreed}'}"
            + (
                f" (every rank exited {agreed})"
                if len(failed) == len(local_ranks)
                and all(int(c["exit_code"]) == agreed for c in failed.values())
                else f" ({len(failed)} of {len(local_ranks)} ranks failed)"
                if len(failed) > 1
                else ""
            ),
            agreed,
        )
    if doc is not None:
        exc.doc = doc
    raise exc


def torchrun(argv: list[str]) -> int:
    """torchrun itself; a failed rank is reported by the ranks' records (see ``conclude``),
    not by the elastic agent's ChildFailedError traceback."""
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.run import main as torchrun_main

    try:
        torchrun_main(argv)
    except ChildFailedError:
        return 1
    return 0


if __name__ == "__main__":
    from burst.train.quick_exit import quick_exit

    quick_exit(torchrun(sys.argv[1:]))  # (torch's teardown would delay the step's exit)
