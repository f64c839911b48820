"""Stale build locks of torch C++ extensions (DeepSpeed's JIT ops).

DeepSpeed builds some ops on first use (on CPU: ``deepspeed_shm_comm``, at
``deepspeed.init_distributed``) through ``torch.utils.cpp_extension``, which guards the build
directory with an empty ``lock`` file (``torch.utils.file_baton.FileBaton``): a process that
finds the file waits, polling, until it disappears, with no time limit and no record of its
owner. A build killed mid-way (a preempted pod with a kept cache volume, a SIGKILLed test)
leaves the file behind, and every later DeepSpeed start on that machine waits for ever. A
build takes a minute or two here; a lock far older than any build is removed, with a warning.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

log = logging.getLogger(__name__)

# far above one build (about 1-2 min for deepspeed_shm_comm on 2 loaded CPU cores)
STALE_AFTER_S = 900.0


def extensions_root() -> Path:
    """Where torch builds extensions: TORCH_EXTENSIONS_DIR, else its default root (under which
    torch adds a per-Python, per-toolkit folder such as ``py311_cpu``)."""
    from torch.utils.cpp_extension import get_default_build_root

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or get_default_build_root())


def clear_stale_build_locks(
    root: Path | None = None, *, stale_after_s: float = STALE_AFTER_S, now: float | None = None
) -> list[Path]:
    """Remove every ``<root>/<extension>/lock`` older than ``stale_after_s``; return them."""
    base = root if root is not None else extensions_root()
    now = time.time() if now is None else now
    removed: list[Path] = []
    # <root>/<extension>/lock, or <root>/py311_cpu/<extension>/lock under the default root
    for lock in sorted({*base.glob("*/lock"), *base.glob("*/*/lock")}):
        try:
            age = now - lock.stat().st_mtime
        except FileNotFoundError:  # the build just finished
            continue
        if age <= stale_after_s:
            continue
        try:
            lock.unlink()
        except FileNotFoundError:
            continue
        log.warning(
            "removed a stale torch extension build lock %s (%.0f s old: a build was killed "
            "mid-way; every DeepSpeed start here would have waited for it for ever)",
            lock,
            age,
        )
        removed.append(lock)
    return removed
