"""SIGTERM and SIGINT as preemption notices.

Kubernetes sends SIGTERM when it evicts a pod (a spot node draining, a node termination
handler) and SIGKILL ``terminationGracePeriodSeconds`` later (30 s unless the pod says
otherwise): the deadline a signal carries is that grace period, ``BURST_SIGTERM_GRACE_S``.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from types import FrameType

from burst.preempt.notice import Notice, NoticeBoard

log = logging.getLogger(__name__)

GRACE_ENV = "BURST_SIGTERM_GRACE_S"
DEFAULT_GRACE_S = 30.0


def grace_seconds() -> float:
    from burst.settings import current

    return current().sigterm_grace_s


def install_signal_watcher(board: NoticeBoard, grace_s: float | None = None) -> Callable[[], None]:
    """Post a notice on SIGTERM / SIGINT; return a function that restores the old handlers."""
    grace = grace_seconds() if grace_s is None else grace_s
    names: dict[int, str] = {signal.SIGTERM: "sigterm", signal.SIGINT: "sigint"}

    def handler(signum: int, _frame: FrameType | None) -> None:
        now = time.time()
        board.post_from_signal(
            Notice(
                names.get(signum, f"signal-{signum}"),
                now,
                now + grace,
                detail=f"grace {grace:g}s ({GRACE_ENV})",
            )
        )

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    log.debug("signal watcher on SIGTERM/SIGINT, grace %.1fs", grace)

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
