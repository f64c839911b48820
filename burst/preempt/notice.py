"""Preemption notices and the board every watcher posts them to.

A ``Notice`` says where it came from and the deadline it learned (seconds since the epoch by
which the node goes away). An *advisory* notice (AWS rebalance recommendation) has no deadline:
the loop takes an early checkpoint and keeps training. The training loop reads the board at
each step boundary; watchers post from signal handlers and threads.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass
from typing import Any


@dataclass(frozen=True)
class Notice:
    source: str  # sigterm, sigint, aws-spot-terminate, aws-rebalance, gcp-preempted, azure-preempt
    received_at: float  # time.time() when the watcher learned it
    deadline: float | None  # time.time() by which the node goes away; None for advisories
    advisory: bool = False
    detail: str = ""

    def seconds_left(self, now: float | None = None) -> float | None:
        if self.deadline is None:
            return None
        return self.deadline - (time.time() if now is None else now)

    def window_s(self) -> float | None:
        """The whole window the notice gave: its deadline less when it was received."""
        return None if self.deadline is None else self.deadline - self.received_at

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        window = self.window_s()
        d["notice_s"] = None if window is None else round(window, 3)
        return d


class NoticeBoard:
    """Thread-safe: the first stop notice is kept (an earlier deadline replaces a later one);
    advisories queue until the loop takes them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop: Notice | None = None
        self._advisories: list[Notice] = []
        self.stopping = threading.Event()

    def post(self, notice: Notice) -> None:
        with self._lock:
            if notice.advisory:
                self._advisories.append(notice)
                return
            if (
                self._stop is None
                or self._stop.deadline is None
                or (notice.deadline is not None and notice.deadline < self._stop.deadline)
            ):
                self._stop = notice
        self.stopping.set()

    def post_from_signal(self, notice: Notice) -> None:
        """Post from a signal handler: no lock (the handler may interrupt a holder of it).

        CPython runs handlers in the main thread between bytecodes; an assignment is atomic.
        """
        if self._stop is None or (
            notice.deadline is not None
            and self._stop.deadline is not None
            and notice.deadline < self._stop.deadline
        ):
            self._stop = notice
        self.stopping.set()

    def stop_notice(self) -> Notice | None:
        return self._stop

    def take_advisories(self) -> list[Notice]:
        with self._lock:
            out, self._advisories = self._advisories, []
        return out
