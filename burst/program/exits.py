"""What a program's last lines say about how it ended: the line that carries the error, and a
worker that a launcher reports killed by a signal.

``error_line`` picks the one line of the error a report shows: the last line that looks like
an exception (``ValueError: loss is nan``, ``[rank1]: RuntimeError: ...``), else the last line
that says anything. Progress bars (tqdm's, redrawn with carriage returns), separator lines
(torchrun's ``=====`` and ``-----``) and empty lines are never it.

``killed_worker`` reads a launcher's failure report. torchrun exits 1 whatever ended a worker
and prints a ``ChildFailedError`` report whose root cause (the first observed failure) names
the worker's rank and exit code, ``-N`` when signal N killed it; ``torch.multiprocessing``'s
``spawn`` raises ``ProcessExitedException: process 1 terminated with signal SIGKILL``. A
worker killed so (the OOM killer, a kill -9) is the program killed: the train step exits as a
killed program does (128 + N), and recovery treats both alike (``burst.recovery``).
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable
from dataclasses import dataclass

ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
#: a progress bar: tqdm's ``37%|███▋ | 37/100 [00:01<00:02, 30.1it/s]`` and the like
PROGRESS = re.compile(r"\d+%\|| \d+/\d+ \[|\d(?:it|s|ba)/(?:s|it)\b|[█▉▊▋▌▍▎▏]{2,}")
#: an exception line: a (dotted) name ending in Error/Exception/Interrupt/Exit, then a message
#: (or nothing at all, as a bare ``AssertionError``), after any ``[rank1]:``-like prefixes
EXCEPTION = re.compile(
    r"(?:^|[\s:\]>])((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit))"
    r"(?::\s*(\S.*)|\s*$)"
)
LINE_CHARS = 300


def _clean(line: str) -> str:
    """What a terminal would show last on the line: the text after its last carriage return
    that is not a progress bar, without colour codes."""
    parts = [ANSI.sub("", p).strip() for p in line.split("\r")]
    for part in reversed(parts):
        if part and not _noise(part):
            return part
    return ""


def _noise(text: str) -> bool:
    return not any(c.isalnum() for c in text) or bool(PROGRESS.search(text))


def error_line(lines: Iterable[str]) -> str:
    """The line of ``lines`` (a program's last output) that carries its error ("" if none)."""
    shown = [c for c in (_clean(ln) for ln in lines) if c]
    chosen = next((c for c in reversed(shown) if EXCEPTION.search(c)), None)
    if chosen is None:
        chosen = shown[-1] if shown else ""
    return chosen if len(chosen) <= LINE_CHARS else chosen[: LINE_CHARS - 3] + "..."


@dataclass(frozen=True)
class KilledWorker:
    """A worker of the program that a signal killed, as its launcher reported it."""

    who: str  # "rank 1 (pid 4242)"
    signum: int

    @property
    def signal_name(self) -> str:
        try:
            return signal.Signals(self.signum).name
        except ValueError:
            return f"signal {self.signum}"

    def as_dict(self) -> dict[str, object]:
        return {"worker": self.who, "signal": self.signal_name}


ROOT_CAUSE = "Root Cause (first observed failure)"
_FIELD = re.compile(r"^\s*(rank|exitcode)\s*:\s*(-?\d+)(?:\s*\((?:local_rank|pid):\s*(\d+)\))?")
_SPAWN = re.compile(r"process (\d+) terminated with signal (SIG[A-Z0-9]+)")


def killed_worker(lines: Iterable[str]) -> KilledWorker | None:
    """The worker the launcher's failure report names as killed by a signal (the root cause
    of torchrun's report, the process of ``torch.multiprocessing.spawn``'s), or None."""
    text = [ANSI.sub("", ln) for ln in lines]
    at = max((i for i, ln in enumerate(text) if ROOT_CAUSE in ln), default=None)
    if at is not None:
        rank: str | None = None
        for ln in text[at + 1 :]:
            m = _FIELD.match(ln)
            if m is None:
                if rank is not None and ln.strip().startswith("="):
                    break  # the end of the report
                continue
            if m.group(1) == "rank":
                rank = m.group(2)
            elif int(m.group(2)) < 0:
                pid = f" (pid {m.group(3)})" if m.group(3) else ""
                who = f"rank {rank}{pid}" if rank is not None else f"a worker{pid}"
                return KilledWorker(who, -int(m.group(2)))
            else:
                return None  # the root cause exited by itself
    for ln in reversed(text):
        s = _SPAWN.search(ln)
        if s and s.group(2) in signal.Signals.__members__:
            return KilledWorker(f"process {s.group(1)}", int(signal.Signals[s.group(2)]))
    return None
