"""Watch the program's checkpoint directory and hand each complete checkpoint to the writer,
in a background thread, while the program trains on.

Every ``interval`` seconds the watcher looks at each top-level entry: its format's rule
(``burst.program.formats``) must call it complete, and its files must not have changed since
the scan before (a save still in progress keeps changing them); then its bytes are read
(``burst.program.snapshot``: unchanged while read) and ``commit(snapshot)`` hands them to the
checkpoint writer. Of several new complete entries only the newest goes (it supersedes the
others). An entry is handed over once; rewritten in place later, it counts as new.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from burst.program.formats import MARKER_SUFFIX, Verdict, judge
from burst.program.snapshot import Signature, Snapshot, newest_mtime, read_entry, signature

log = logging.getLogger(__name__)

SCAN_S = 0.5


@dataclass
class Handed:
    """A checkpoint handed to the writer: which, when (time.time()), saved when (its newest
    file's mtime)."""

    name: str
    step: int
    format: str
    at: float
    saved_at: float
    nbytes: int


@dataclass
class DirWatcher:
    directory: Path
    commit: Callable[[Snapshot], None]
    interval: float = SCAN_S
    handed: list[Handed] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # entry -> why not (the last word)
    _last: dict[str, Signature] = field(default_factory=dict)  # the scan before
    _done: dict[str, Signature] = field(default_factory=dict)  # handed over (or restored)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: BaseException | None = None

    def known(self, entry: Path) -> None:
        """An entry already in the store (restored into the directory): not handed again."""
        sig = signature(entry)
        if sig is not None:
            self._done[entry.name] = sig

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True, name="ckpt-dir-watch")
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.scan()
            except BaseException as exc:  # the main thread reports it
                log.exception("checkpoint directory watcher failed")
                self.error = exc
                return

    def stop(self) -> None:
        """Stop scanning; a hand-over in progress finishes first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def newest_step(self) -> int | None:
        return max((h.step for h in self.handed), default=None)

    def next_step(self) -> int:
        """The step of an entry whose name and contents hold none: after the newest."""
        steps = [h.step for h in self.handed]
        return max(steps) + 1 if steps else 1

    def scan(self, *, final: bool = False) -> Handed | None:
        """One look; ``final``: the program has exited, nothing is being written any more, so
        an entry need not be seen twice unchanged. Returns what was handed over."""
        with self._lock:
            return self._scan(final)

    def _scan(self, final: bool) -> Handed | None:
        try:
            entries = sorted(self.directory.iterdir())
        except FileNotFoundError:
            return None
        ready: list[tuple[int, float, Path, Verdict, Signature]] = []
        current: dict[str, Signature] = {}
        for entry in entries:
            if entry.is_symlink():
                continue
            if entry.name.endswith(MARKER_SUFFIX):
                target = entry.with_name(entry.name.removesuffix(MARKER_SUFFIX))
                if not target.exists():
                    self._note(target.name, "deleted (its marker remains)")
                continue
            try:
                verdict = judge(entry)
            except OSError:
                continue  # deleted under us
            if verdict is None:
                continue
            sig = signature(entry)
            if sig is None:
                continue
            current[entry.name] = sig
            if self._done.get(entry.name) == sig:
                continue
            if not verdict.complete:
                self._note(entry.name, verdict.why)
                continue
            if not final and self._last.get(entry.name) != sig:
                continue  # seen changing: look again next time
            step = verdict.step if verdict.step is not None else self.next_step()
            ready.append((step, newest_mtime(sig), entry, verdict, sig))
        self._last = current
        if not ready:
            return None
        ready.sort(key=lambda r: (r[0], r[1]))
        for step, _mtime, entry, verdict, sig in reversed(ready):  # newest first
            snap = read_entry(entry, verdict, step)
            if isinstance(snap, str):
                self._note(entry.name, snap)
                continue
            self.commit(snap)
            handed = Handed(
                entry.name, step, verdict.format, time.time(), newest_mtime(sig), snap.nbytes
            )
            self.handed.append(handed)
            for _s, _m, other, _v, osig in ready:  # older ones are superseded
                self._done[other.name] = osig
            self._done[entry.name] = sig
            self.skipped.pop(entry.name, None)
            return handed
        return None

    def _note(self, name: str, why: str) -> None:
        if self.skipped.get(name) != why:
            log.info("checkpoint %s not committed (yet): %s", name, why)
        self.skipped[name] = why
