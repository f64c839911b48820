"""SIGTERM and SIGINT as preemption notices.

Kubernetes sends SIGTERM when it evicts a pod (a spot node draining, a node termination
handler) and SIGKILL ``terminationGracePeriodSeconds`` later (30 s unless the pod says
otherwise): the deadline a signal carries is that grace period, ``BURST_SIGTERM_GRACE_S``.

A step that trains catches them from its first moment (:func:`watch_from_start`, the first
act of ``python -m burst.steps.train``): a notice that arrives while the step starts (its
imports, the spec, the store) is kept and posted on the attempt's board as soon as its
watchers start (:func:`install_signal_watcher`), so the loop acts on it at its first step
boundary. Without it the default action killed the step there (exit 143: no attempt record,
neither retried nor restarted, the run failed).
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

#: The signals that are notices
NOTICE_SIGNALS = frozenset({signal.SIGTERM, signal.SIGINT})
_NAMES: dict[int, str] = {signal.SIGTERM: "sigterm", signal.SIGINT: "sigint"}

#: Notices caught since :func:`watch_from_start` that no watcher has posted yet:
#: (signal number, time.time() it was caught)
_caught: list[tuple[int, float]] = []
_from_start: float | None = None  # time.time() of watch_from_start


#: The window of the next notice, when this process sends it to itself with a window of its
#: own (:func:`expect_own_notice`)
_own_window: list[float] = []
_own_window_source = "the notice's own window"


def expect_own_notice(window_s: float) -> None:
    """The next notice this process receives is one it sends itself, with a window of
    ``window_s`` rather than the grace period (burst.faults' demo ``STEP:notice=SECONDS``)."""
    _own_window[:] = [window_s]


def grace_seconds() -> float:
    from burst.settings import current

    return current().sigterm_grace_s


def watch_from_start() -> None:
    """Catch SIGTERM / SIGINT from now until the process exits, keeping each (the first act
    of a step that trains). Signals the process inherited blocked are unblocked: one sent
    before this is taken now. Idempotent.

    What is caught is posted by the next :func:`install_signal_watcher` (the attempt's
    watchers); one caught after they stop (while the step writes its document) is a late
    notice: the step ends as it would have, not killed by the default action."""
    global _from_start
    if _from_start is not None:
        return

    def keep(signum: int, _frame: FrameType | None) -> None:
        _caught.append((signum, time.time()))

    _from_start = time.time()  # (before a handler: what sees one sees the attempt started)
    for s in NOTICE_SIGNALS:
        signal.signal(s, keep)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, NOTICE_SIGNALS)


def watching_since() -> float | None:
    """time.time() of :func:`watch_from_start` in this process (None: not called): when the
    train step's attempt started, as far as its notices go (a cancel while it started is
    this attempt's)."""
    return _from_start


def take_caught() -> list[tuple[int, float]]:
    """The notices caught since :func:`watch_from_start` that nothing has taken yet (for a
    process that does not post them on a board: the train step's launcher forwards them)."""
    out = list(_caught)
    del _caught[: len(out)]
    return out


def install_signal_watcher(board: NoticeBoard, grace_s: float | None = None) -> Callable[[], None]:
    """Post a notice on SIGTERM / SIGINT, and each one caught since :func:`watch_from_start`;
    return a function that restores the old handlers."""
    grace = grace_seconds() if grace_s is None else grace_s

    def notice(signum: int, received_at: float) -> Notice:
        window, source = (_own_window.pop(), _own_window_source) if _own_window else (grace, None)
        return Notice(
            _NAMES.get(signum, f"signal-{signum}"),
            received_at,
            received_at + window,
            detail=f"grace {window:g}s ({source or GRACE_ENV})",
        )

    def handler(signum: int, _frame: FrameType | None) -> None:
        board.post_from_signal(notice(signum, time.time()))

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    log.debug("signal watcher on SIGTERM/SIGINT, grace %.1fs", grace)
    for signum, received_at in take_caught():  # (the handler posts any later one)
        log.warning("%s received while the step started", _NAMES.get(signum, signum))
        board.post(notice(signum, received_at))

    def restore() -> None:
        for s, h in previous.items():
            signal.signal(s, h)

    return restore
