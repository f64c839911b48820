"""Fault injection for crash tests: kill this process with SIGKILL at a named point.

``BURST_CHECKPOINT_FAULT=<point>[:<n>]`` makes the ``n``-th call (default 1) of ``point(name)``
whose name starts with ``<point>`` kill the calling process, exactly as a preemption or an
out-of-memory kill would; ``BURST_CHECKPOINT_FAULT_RANK=<r>`` limits it to rank r's worker.
Unset, ``point`` costs one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import threading

ENV = "BURST_CHECKPOINT_FAULT"
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
        if _hits >= int(nth or "1"):
            os.kill(os.getpid(), signal.SIGKILL)
