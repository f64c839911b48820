"""Fault injection for crash tests: kill (or pause) this process at a named point.

``BURST_CHECKPOINT_FAULT=<point>[:<n>]`` makes the ``n``-th call (default 1) of ``point(name)``
whose name starts with ``<point>`` kill the calling process with SIGKILL, exactly as a
preemption or an out-of-memory kill would; ``BURST_CHECKPOINT_FAULT_RANK=<r>`` limits it to
rank r's worker. Unset, ``point`` costs one dictionary lookup.

Two modifiers, for faults that span processes (a restarted checkpoint worker counts its calls
afresh):

* ``BURST_CHECKPOINT_FAULT_ONCE=<file>``: fire only if ``<file>`` does not exist yet, and
  create it when firing, so a worker started again after the fault runs normally.
* ``BURST_CHECKPOINT_FAULT_ACTION=pause:<dir>``: instead of dying, create ``<dir>/paused`` and
  wait (at most 10 minutes) until ``<dir>/resume`` exists: a test holds the process at the
  point while it breaks something else (stops the object store).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

ENV = "BURST_CHECKPOINT_FAULT"
ONCE_ENV = "BURST_CHECKPOINT_FAULT_ONCE"
ACTION_ENV = "BURST_CHECKPOINT_FAULT_ACTION"
PAUSE_LIMIT_S = 600.0
_lock = threading.Lock()
_hits = 0


def point(name: str) -> None:
    from burst.settings import current

    spec = current().checkpoint_fault
    if not spec:
        return
    only = current().checkpoint_fault_rank  # several ranks: only this rank's worker
    if only and os.environ.get("RANK", "0") != only:
        return
    target, _, nth = spec.partition(":")
    if not name.startswith(target):
        return
    global _hits
    with _lock:
        _hits += 1
        if _hits < int(nth or "1"):
            return
        once = current().checkpoint_fault_once
        if once:
            try:
                fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                return  # fired already (in this or an earlier process)
            os.close(fd)
        action = current().checkpoint_fault_action
        if action.startswith("pause:"):
            _pause(Path(action.removeprefix("pause:")))
            return
        os.kill(os.getpid(), signal.SIGKILL)


def _pause(where: Path) -> None:
    (where / "paused").write_text(str(os.getpid()))
    end = time.monotonic() + PAUSE_LIMIT_S
    while not (where / "resume").exists() and time.monotonic() < end:
        time.sleep(0.05)
