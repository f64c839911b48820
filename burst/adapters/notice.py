"""What every framework adapter shares: is there a preemption notice, where to save, where to
resume from (``burst.program.contract``), how training ends on a notice (``StoppedByNotice``),
and what it tells burst (the step it resumed at).

A notice arrives two ways and either is enough: the signal burst sends (``BURST_NOTICE_SIGNAL``,
SIGUSR1 by default), whose handler only sets a flag, and the notice file
(``BURST_NOTICE_FILE``), read at most every ``poll_s`` seconds. The adapters look at the flag
between steps, never inside the handler: a save from a signal handler could run in the middle
of an optimizer step.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

from burst.errors import EXIT_PREEMPTED, BadInputError
from burst.program.contract import (
    NOTICE_SIGNAL,
    RESUME_FROM,
    RESUMED_FILE,
    Notice,
    notice_from_env,
    report_path,
    write_report,
)
from burst.settings import Settings

log = logging.getLogger(__name__)

DEFAULT_SIGNAL = "SIGUSR1"


class StoppedByNotice(SystemExit):
    """Raised out of ``Trainer.train()`` (Hugging Face) or ``Trainer.fit()`` (Lightning) by
    burst's callback once the checkpoint it saved on a preemption notice is written: the code
    after training (a final save, an evaluation, an upload) never runs on a model that is not
    final. Uncaught, the program exits 75 (``EXIT_PREEMPTED``, burst's "requeue me") without a
    traceback, as burst itself does when preempted; a script that wants to tell a notice from
    a normal end catches it (``step``: the step saved, ``path``: where). A ``SystemExit``, as
    Lightning's own ``SIGTERMException``: ``except Exception`` does not swallow it."""

    def __init__(self, step: int, path: str | Path | None = None) -> None:
        super().__init__(EXIT_PREEMPTED)
        self.step = step
        self.path = None if path is None else str(path)

    def __str__(self) -> str:
        where = f" ({self.path})" if self.path else ""
        return f"stopped by a preemption notice after saving step {self.step}{where}"


def report_resumed(step: int, framework: str, environ: dict[str, str] | None = None) -> None:
    """Tell burst the step training (re)started at, from the framework's own state once it has
    loaded what burst restored (``RESUMED_FILE`` beside the notice file; burst reports it as
    the attempt's ``resumed_from``). Only the first process of the job writes; nothing outside
    burst (no ``BURST_NOTICE_FILE``)."""
    env = os.environ if environ is None else environ
    path = report_path(RESUMED_FILE, environ)
    if path is None or env.get("RANK", "0") != "0":
        return
    try:
        write_report(path, {"step": int(step), "framework": framework})
    except OSError as exc:  # telling burst must never cost the training
        log.warning("could not tell burst the step training resumed at: %s", exc)


def notice_signal(environ: dict[str, str] | None = None) -> signal.Signals:
    """The signal burst sends on a notice (``BURST_NOTICE_SIGNAL``: a name, SIGUSR1 if unset)."""
    given = Settings.from_env(environ).program_notice_signal or DEFAULT_SIGNAL
    name = given.upper() if given.upper().startswith("SIG") else f"SIG{given.upper()}"
    try:
        return signal.Signals[name]
    except KeyError:
        raise BadInputError(
            f"{NOTICE_SIGNAL}={given!r} is not a signal name (e.g. SIGUSR1)"
        ) from None


class NoticeWatch:
    """Has a preemption notice arrived? (signal flag, or the notice file)"""

    def __init__(self, *, poll_s: float = 1.0, environ: dict[str, str] | None = None) -> None:
        self.poll_s = poll_s
        self.environ = environ
        self.notice: Notice | None = None
        self._flag = threading.Event()
        self._next_poll = 0.0
        self._previous: Any = None
        self._signal: signal.Signals | None = None

    def install(self) -> bool:
        """Catch the notice signal (only possible on the main thread; False elsewhere, and
        the notice file still works). A handler installed before is still called."""
        if threading.current_thread() is not threading.main_thread() or self._signal:
            return False
        sig = notice_signal(self.environ)
        self._previous = signal.signal(sig, self._on_signal)
        self._signal = sig
        return True

    def uninstall(self) -> None:
        if self._signal is not None and threading.current_thread() is threading.main_thread():
            signal.signal(self._signal, self._previous or signal.SIG_DFL)
        self._signal = None

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._flag.set()
        if callable(self._previous):
            self._previous(signum, frame)

    def arrived(self) -> bool:
        """True once a notice has arrived (stays true)."""
        if self._flag.is_set():
            return True
        now = time.monotonic()
        if now >= self._next_poll:
            self._next_poll = now + self.poll_s
            self.notice = notice_from_env(self.environ)
            if self.notice is not None:
                self._flag.set()
        return self._flag.is_set()


def checkpoint_dir(default: str | Path = "checkpoints") -> Path:
    """Where the program saves (``BURST_CHECKPOINT_DIR``; ``default`` outside burst)."""
    return Settings.from_env().program_checkpoint_dir or Path(default)


STEP_RE = re.compile(r"(\d+)")


def resume_from(pattern: str = "*") -> Path | None:
    """The checkpoint burst restored for this attempt (``BURST_RESUME_FROM``), or None on a
    fresh start. If it names a directory with no match of ``pattern`` itself, the entry in it
    matching ``pattern`` with the highest step number (``checkpoint-40``, ``step-40.ckpt``)."""
    path = Settings.from_env().program_resume_from
    if path is None or str(path) in ("", "."):
        return None
    if not path.exists():
        raise BadInputError(f"{RESUME_FROM}={path}: no such file or directory")
    if path.is_file() or pattern == "*" or path.match(pattern):
        return path
    found = sorted(
        (p for p in path.glob(pattern) if not p.name.startswith(".")),
        key=lambda p: [int(n) for n in STEP_RE.findall(p.name)] or [-1],
    )
    return found[-1] if found else path
