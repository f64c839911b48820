"""Children that end with the process that started them."""

from __future__ import annotations

import signal
import sys

PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """``preexec_fn`` of a child that must not outlive its parent (a killed ``burst run`` of a
    regional spec leaves no S3 server or role process behind): on Linux the kernel sends it
    SIGKILL when the thread that started it ends (``prctl(PR_SET_PDEATHSIG)``), so start such
    children from the main thread. Elsewhere nothing is armed (the roles' own wait limits end
    them)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import ctypes.util

    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
