"""The processes of a user's program, wherever its launcher put them, and which of them train.

A program is more than the process burst starts: torchrun's agent starts each worker in a
POSIX session of its own (``start_new_session``), a shell wrapper runs Python as its child, a
worker may call ``setsid``/``setpgid`` itself or outlive the parent that started it. So the
program's processes are found from ``/proc``, not from a process group or a session:

* the descendants of the process burst started (``PPid`` links, whatever their session);
* the processes of its session, and those whose environment carries the program's mark
  (``MARK``, inherited through every fork and exec that keeps the environment): a worker
  whose parent died is reparented away from the tree and still found.

Which of them get the notice signal (``recipients``): every one that has a handler for it
(``SigCgt`` in ``/proc/PID/status``: one without would die of it), except a launcher's agent
(torchrun, ``torch.distributed.launch``, or any process whose children are torch elastic
workers while it is none): its handler, where it has one, tears its workers down.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
#: the variable burst sets, with a value of its own per program, in the program's environment
MARK = "BURST_PROGRAM_MARK"
#: launchers' agents, by the module or script they run (their handlers stop their workers)
LAUNCHER_MODULES = ("torch.distributed.run", "torch.distributed.launch")
LAUNCHER_SCRIPTS = ("torch/distributed/run.py", "torch/distributed/launch.py")
LAUNCHER_NAME = "torchrun"
#: Python's options that take the next word as their value
PYTHON_VALUE_OPTIONS = ("-W", "-X", "--check-hash-based-pycs")
#: torchrun sets this in every worker's environment (and not in its own)
ELASTIC_WORKER = b"TORCHELASTIC_RUN_ID"
COMMAND_CHARS = 160


@dataclass(frozen=True)
class Proc:
    """One process, as ``/proc/PID/stat`` shows it."""

    pid: int
    ppid: int
    sid: int
    #: its start time (clock ticks since boot): a pid reused later has another
    started: int
    name: str

    def argv(self) -> list[str]:
        try:
            raw = (PROC / str(self.pid) / "cmdline").read_bytes()
        except OSError:
            return []
        return [a.decode("utf-8", "replace") for a in raw.rstrip(b"\0").split(b"\0") if a]

    def command(self) -> str:
        """Its command line (shortened), or its name when it has none."""
        text = " ".join(self.argv())
        if len(text) > COMMAND_CHARS:
            text = text[: COMMAND_CHARS - 3] + "..."
        return text or self.name

    def alive(self) -> bool:
        """Still the same process (not exited, its pid not reused)."""
        now = stat(self.pid)
        return now is not None and now.started == self.started


def stat(pid: int) -> Proc | None:
    """The process ``pid`` (None when it is gone)."""
    try:
        raw = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    head, _, rest = raw.rpartition(")")  # the name may hold spaces and parentheses
    fields = rest.split()
    if len(fields) < 20 or fields[0] == "Z":  # a zombie has exited: nothing left to signal
        return None
    return Proc(pid, int(fields[1]), int(fields[3]), int(fields[19]), head.partition("(")[2])


def every_process() -> dict[int, Proc]:
    out = {}
    for d in PROC.iterdir():
        if d.name.isdigit():
            p = stat(int(d.name))
            if p is not None:
                out[p.pid] = p
    return out


def environ(pid: int) -> list[bytes]:
    """The environment the process was started with (``NAME=value`` entries)."""
    try:
        return (PROC / str(pid) / "environ").read_bytes().split(b"\0")
    except OSError:
        return []


def program_tree(root: int, mark: str | None = None) -> list[Proc]:
    """The processes of the program started as ``root`` (itself first, while it lives): its
    descendants, its session's processes and those carrying ``MARK=mark``, with theirs."""
    procs = every_process()
    me = os.getpid()
    found = {root} if root in procs else set()
    found |= {p.pid for p in procs.values() if p.sid == root}
    if mark is not None:
        entry = f"{MARK}={mark}".encode()
        found |= {pid for pid in procs if pid != me and entry in environ(pid)}
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    found.discard(me)
    return sorted((procs[pid] for pid in found), key=lambda p: (p.pid != root, p.started, p.pid))


def catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for ``signum`` (``SigCgt`` in /proc/PID/status)."""
    try:
        status = (PROC / str(pid) / "status").read_text()
    except OSError:
        return False
    for line in status.splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (signum - 1)))
    return False


def is_launcher(p: Proc, tree: Iterable[Proc]) -> bool:
    """A launcher's agent: torchrun (or ``torch.distributed.launch``) by its command line, or
    a process that is no torch elastic worker but whose children are (``accelerate launch``
    and other launchers that run torch's elastic agent in-process)."""
    if runs_launcher(p.argv()):
        return True
    kids = [c for c in tree if c.ppid == p.pid]
    if not kids or _elastic_worker(p.pid):
        return False
    return any(_elastic_worker(c.pid) for c in kids)


def runs_launcher(argv: list[str]) -> bool:
    """Whether the command runs torchrun's agent: ``torchrun ...``, ``python -m
    torch.distributed.run ...``, ``python .../bin/torchrun ...`` (a script named
    ``torchrun_train.py`` is no launcher)."""
    if not argv:
        return False
    if Path(argv[0]).name == LAUNCHER_NAME:
        return True
    if not Path(argv[0]).name.startswith("python"):
        return False
    words = iter(argv[1:])
    for word in words:
        if word.startswith("-m"):
            return (word[2:] or next(words, "")) in LAUNCHER_MODULES
        if word.startswith("-c"):
            return False
        if word in PYTHON_VALUE_OPTIONS:
            next(words, "")
        if word.startswith("-"):
            continue
        return Path(word).name == LAUNCHER_NAME or word.endswith(LAUNCHER_SCRIPTS)
    return False


def _elastic_worker(pid: int) -> bool:
    return any(e.startswith(ELASTIC_WORKER + b"=") for e in environ(pid))


@dataclass(frozen=True)
class Decision:
    """What the notice does to each process of the program."""

    send: list[Proc]
    #: the others, each with why not
    skipped: list[tuple[Proc, str]]


def recipients(tree: list[Proc], signum: int, skip: Iterable[int] = ()) -> Decision:
    """Which processes of ``tree`` get ``signum``: those with a handler for it, less the
    launchers' agents and the pids in ``skip`` (signalled before)."""
    send: list[Proc] = []
    skipped: list[tuple[Proc, str]] = []
    done = set(skip)
    for p in tree:
        if p.pid in done:
            continue
        if not catches(p.pid, signum):
            skipped.append((p, "no handler"))
        elif is_launcher(p, tree):
            skipped.append((p, "a launcher's agent"))
        else:
            send.append(p)
    return Decision(send, skipped)


def kill_all(procs: Iterable[Proc], signum: int) -> list[Proc]:
    """Send ``signum`` to each of ``procs`` still alive as itself; those it reached."""
    reached = []
    for p in procs:
        if p.pid == os.getpid() or not p.alive():
            continue
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p.pid, signum)
            reached.append(p)
    return reached
