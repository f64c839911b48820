"""Start the user's program with the environment contract, tell it of a notice, stop it.

The program runs in a session of its own: a SIGTERM or Ctrl-C sent to the train step's
process group reaches burst (a preemption notice), and burst decides what the program gets
(``training.notice_signal``, then SIGTERM, then SIGKILL). Its processes are all those of its
tree, whatever session or process group a launcher or the program put them in
(``burst.program.tree``): the notice reaches each one that handles it, and stopping the
program ends every one. Its output (stdout and stderr) goes to ``program.log`` in the run
directory and to the step's log, line by line; the last lines are kept for the report.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import logging
import os
import shutil
import signal
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterable
from pathlib import Path

from burst.program import contract, tree
from burst.program.tree import Proc
from burst.settings import current
from burst.spec import BurstJob, gpus_per_pod

log = logging.getLogger(__name__)

TAIL_LINES = 20
#: the lines kept to find the error in (a torchrun failure report alone is 25 lines or more)
RECENT_LINES = 400


def program_argv(job: BurstJob) -> list[str]:
    """The command as started: as written, or under torchrun (``launcher: torchrun``)."""
    command = interpreted(list(job.training.command or []))
    if job.training.launcher != "torchrun":
        return command
    t = job.training
    gang = bool(current().gang)
    nodes = t.nodes
    opts = [f"--nnodes={nodes}", f"--nproc-per-node={t.processes_per_node}"]
    if nodes > 1 or gang:
        opts += [
            f"--node-rank={os.environ.get(contract.NODE_RANK, os.environ.get('RANK', '0'))}",
            f"--master-addr={os.environ.get(contract.MASTER_ADDR, '127.0.0.1')}",
            f"--master-port={os.environ.get(contract.MASTER_PORT, '29500')}",
        ]
    else:
        opts = ["--standalone", *opts]
    head = [sys.executable, "-m", "torch.distributed.run", *opts, "--max-restarts=0"]
    first = command[0]
    if first.endswith(".py"):
        startable(first, script=True)
        return [*head, *command]
    if first == sys.executable and len(command) > 1:
        return [*head, *command[1:]]  # python train.py ... / python -m pkg.train ...
    startable(first)
    return [*head, "--no-python", *command]


def startable(first: str, *, script: bool = False) -> None:
    """Raise what starting ``first`` here would raise (FileNotFoundError, PermissionError,
    naming it) before a launcher is started for it: under torchrun a missing program is
    otherwise each rank's traceback and an exit 1, not the train step's one line (exit 2,
    ``burst.steps.train.missing_program``)."""
    if script:
        if not Path(first).is_file():
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), first)
        return
    if resolve([first]) is not None:
        return
    if os.sep in first and Path(first).exists():
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), first)
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), first)


#: a command's first word that means the Python burst itself runs with (the trainer image's)
PYTHON_WORDS = ("python", "python3")


def interpreted(command: list[str]) -> list[str]:
    """``python ...`` runs with burst's own interpreter (the trainer image's Python)."""
    if command and command[0] in PYTHON_WORDS:
        return [sys.executable, *command[1:]]
    return command


def program_env(
    job: BurstJob,
    run_id: str,
    checkpoint_dir: Path,
    notice_file: Path,
    resume_from: Path | None,
    deadline: float | None,
) -> dict[str, str]:
    """The environment of ``burst.program.contract``, over the step's own."""
    env = dict(os.environ)
    t = job.training
    node_rank = env.get("RANK", "0") if current().gang else "0"
    env.update(
        {
            contract.RUN_ID: run_id,
            contract.CHECKPOINT_DIR: str(checkpoint_dir),
            contract.NOTICE_FILE: str(notice_file),
            contract.NOTICE_SIGNAL: t.notice_signal,
            contract.NODE_RANK: node_rank,
            contract.NNODES: str(t.nodes),
            contract.NPROC_PER_NODE: str(t.processes_per_node),
            contract.MASTER_ADDR: env.get(contract.MASTER_ADDR, "127.0.0.1"),
            contract.MASTER_PORT: env.get(contract.MASTER_PORT, "29500"),
            contract.SKYPILOT_NODE_RANK: node_rank,
            contract.SKYPILOT_NUM_NODES: str(t.nodes),
            contract.SKYPILOT_NUM_GPUS_PER_NODE: str(gpus_per_pod(job)),
            contract.SKYPILOT_TASK_ID: run_id,
        }
    )
    env.pop(contract.RESUME_FROM, None)
    if resume_from is not None:
        env[contract.RESUME_FROM] = str(resume_from)
    if deadline is not None:
        env[contract.STEP_DEADLINE] = str(int(deadline))
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


#: the variables an argument may name as ``$NAME`` or ``${NAME}`` (no shell: burst expands these)
EXPANDED = (
    contract.RUN_ID,
    contract.CHECKPOINT_DIR,
    contract.RESUME_FROM,
    contract.NOTICE_FILE,
    contract.NODE_RANK,
    contract.NNODES,
    contract.NPROC_PER_NODE,
    contract.MASTER_ADDR,
    contract.MASTER_PORT,
    contract.SKYPILOT_NODE_RANK,
    contract.SKYPILOT_NUM_NODES,
    contract.SKYPILOT_NUM_GPUS_PER_NODE,
)


def expand(argv: list[str], env: dict[str, str]) -> list[str]:
    """``$BURST_CHECKPOINT_DIR`` and the other contract variables in the arguments, expanded
    as a shell would (the command runs without one); anything else is left as written."""
    values = {k: env.get(k, "") for k in EXPANDED}
    return [string.Template(a).safe_substitute(values) for a in argv]


def resolve(command: list[str], env: dict[str, str] | None = None) -> str | None:
    """The executable the command's first word names, or None when there is none."""
    first = command[0]
    path = (env or os.environ).get("PATH")
    if os.sep in first:
        p = Path(first)
        return str(p) if p.is_file() and os.access(p, os.X_OK) else None
    return shutil.which(first, path=path)


class Program:
    """The running program (the process burst started and every process of its tree)."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path) -> None:
        self.argv = argv
        self.log_path = log_path
        self.recent: collections.deque[str] = collections.deque(maxlen=RECENT_LINES)
        self.started = time.time()
        self.mark = uuid.uuid4().hex
        #: every process of the program seen so far, by pid
        self.seen: dict[int, Proc] = {}
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(log_path, "a", encoding="utf-8", errors="replace")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv,
            env={**env, tree.MARK: self.mark},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._reader = threading.Thread(target=self._read, daemon=True, name="program-output")
        self._reader.start()
        log.info("program started (pid %d): %s", self.proc.pid, " ".join(argv))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode("utf-8", errors="replace").rstrip("\n")
            self.recent.append(line)
            self._log.write(line + "\n")
            self._log.flush()
            # the step's own log carries the program's output as it comes
            sys.stderr.write(f"[program] {line}\n")
        self._log.close()

    @property
    def tail(self) -> list[str]:
        """The last lines of its output (the report's)."""
        return list(self.recent)[-TAIL_LINES:]

    def poll(self) -> int | None:
        return self.proc.poll()

    def exit_code(self) -> int:
        """The exit status as a shell reports it (a signal N: 128 + N)."""
        code = self.proc.wait()
        return 128 - code if code < 0 else code

    def finish_output(self, timeout: float = 5.0) -> None:
        self._reader.join(timeout)

    def processes(self) -> list[Proc]:
        """Every process of the program now (``burst.program.tree``), remembered for
        ``stop``: a worker whose parent died is still found."""
        procs = tree.program_tree(self.proc.pid, self.mark)
        self.seen.update((p.pid, p) for p in procs)
        return procs

    def notify(self, signame: str, skip: Iterable[int] = ()) -> list[Proc]:
        """Send the notice signal to each process of the program that handles it (one without
        a handler would die of it, and so would torchrun's agent: it trains on until burst
        stops it, so a save under way may still finish and commit), except those in ``skip``
        (signalled before); the processes it reached."""
        signum = signal.Signals[signame]
        decision = tree.recipients(self.processes(), signum, skip)
        sent = tree.kill_all(decision.send, signum)
        if sent:
            log.info(
                "sent %s to %d process(es) of the program: %s",
                signame,
                len(sent),
                "; ".join(f"{p.pid} {p.command()}" for p in sent),
            )
        if decision.skipped and not skip:
            log.info(
                "not sent to: %s",
                "; ".join(f"{p.pid} {p.command()} ({why})" for p, why in decision.skipped),
            )
        return sent

    def stop(self, grace: float) -> int:
        """SIGTERM to the program's session, SIGKILL after ``grace`` seconds to every process
        of the program left (``end_the_rest``); its exit code."""
        if self.proc.poll() is None:
            self.processes()  # its tree now: SIGTERM may orphan workers of their own session
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=max(0.1, grace))
            except subprocess.TimeoutExpired:
                log.warning("the program did not stop within %.1fs of SIGTERM: SIGKILL", grace)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)  # and whatever it left in its session
        self.end_the_rest()
        code = self.exit_code()
        self.finish_output()
        return code

    def end_the_rest(self) -> list[Proc]:
        """SIGKILL every process of the program still alive (workers of a launcher that died,
        a worker in a session of its own); those it reached."""
        procs = {p.pid: p for p in self.seen.values()}
        procs.update((p.pid, p) for p in self.processes())
        procs.pop(self.proc.pid, None)  # burst's own child: reaped by exit_code()
        shown = {pid: p.command() for pid, p in procs.items()}
        left = tree.kill_all(procs.values(), signal.SIGKILL)
        if left:
            log.warning(
                "SIGKILL to %d process(es) the program left: %s",
                len(left),
                "; ".join(f"{p.pid} {shown[p.pid]}" for p in left),
            )
        return left
