"""Watch the program's checkpoint directory and hand each complete checkpoint to the writer,
in a background thread, while the program trains on.

Every ``interval`` seconds the watcher walks the directory (``burst.program.formats``:
subdirectories that are no checkpoint themselves are looked into) and judges each entry by its
format's rule; an entry counts once it is complete, has a step (the framework's own, never one
made up) and its files did not change since the scan before (a save still in progress keeps
changing them). Its bytes are then read (``burst.program.snapshot``: unchanged while read) and
``commit(snapshot)`` hands them to the checkpoint writer.

What one commit holds is what the framework's own resume logic will open: every complete
entry of the newest step together (Lightning's ``epoch=0-step=40.ckpt`` with the
``last.ckpt`` that ``ckpt_path="last"`` opens; a link to one of them as a link), the entry a
resume starts from first. Older entries that become ready after a newer one are superseded; an
entry of the newest step that becomes ready after it was committed (a ``last.ckpt`` written
second) commits that step again, whole. When the program has ended cleanly (``outputs``), its
outputs (files no rule knows, complete entries without a step: ``trainer.save_model()``'s
files) commit with its last checkpoint, so nothing it wrote is lost at teardown.

An entry is handed over once; rewritten in place later, it counts as new. What was restored
into the directory before the program started is known (``known``) and not handed again.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from burst.program.contract import RESUMED_FILE, STORED_FILE, read_report
from burst.program.formats import (
    MARKER_SUFFIX,
    Verdict,
    candidates,
    is_last_alias,
    judge,
    link_target,
)
from burst.program.snapshot import Part, Signature, Snapshot, newest_mtime, read_part, signature

log = logging.getLogger(__name__)

SCAN_S = 0.5
#: why a complete entry without a step is not a checkpoint of its own
NO_STEP = (
    "complete, but no step in its name or its contents (burst makes none up): it commits "
    "with the program's outputs when the program ends; for a checkpoint of its own, name it "
    "step-N or mark it (burst.checkpoint.commit(path, step))"
)


@dataclass
class Handed:
    """A checkpoint handed to the writer: which (its first entry; ``names``: all of them),
    when (time.time()), saved when (its newest file's mtime)."""

    name: str
    step: int
    format: str
    at: float
    saved_at: float
    nbytes: int
    names: list[str] = field(default_factory=list)


@dataclass
class _Item:
    """One entry seen by a scan."""

    rel: str  # its path under the directory
    path: Path
    sig: Signature
    verdict: Verdict | None  # None: no rule knows it (an output), or a link
    target: str | None = None  # a link: the entry it points at (its path under the directory)

    @property
    def checkpoint_step(self) -> int | None:
        v = self.verdict
        return v.step if v is not None and v.complete and self.target is None else None


@dataclass
class DirWatcher:
    directory: Path
    commit: Callable[[Snapshot], None]
    interval: float = SCAN_S
    handed: list[Handed] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # entry -> why not (the last word)
    #: set when the program has ended cleanly: its outputs commit with its last checkpoint
    outputs: bool = False
    #: the step of the checkpoint restored into the directory (``known``)
    base_step: int | None = None
    #: where the adapters' files for burst are (``RESUMED_FILE``, ``STORED_FILE``): beside
    #: the notice file, by default the directory's parent (the supervisor's layout)
    reports: Path | None = None
    _last: dict[str, Signature] = field(default_factory=dict)  # the scan before
    _done: dict[str, Signature] = field(default_factory=dict)  # handed over (or restored)
    _cache: dict[str, tuple[object, Verdict | None]] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    error: BaseException | None = None

    def __post_init__(self) -> None:
        if self.reports is None:
            self.reports = self.directory.parent
        for name in (RESUMED_FILE, STORED_FILE):  # a former attempt's word is not this one's
            with contextlib.suppress(FileNotFoundError):
                (self.reports / name).unlink()

    def known(self, entry: Path) -> None:
        """The directory holds a checkpoint restored from the store, ``entry`` the one a
        resume starts from: none of what is in the directory now is handed again (call it
        before the program starts), and the newest step is the restored one."""
        with self._lock:
            for item in self._look():
                self._done[item.rel] = item.sig
        verdict = judge(entry) if entry.exists() else None
        if verdict is not None and verdict.step is not None:
            self.base_step = verdict.step

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

    def _newest(self) -> int | None:
        """The newest step committed this attempt, or restored into the directory."""
        steps = [h.step for h in self.handed]
        if self.base_step is not None:
            steps.append(self.base_step)
        return max(steps, default=None)

    # ---------------------------------------------------------------- what the program says

    def resumed_step(self) -> int | None:
        """The step the program's framework resumed at, as its adapter wrote it
        (``RESUMED_FILE``); None when no adapter said."""
        doc = read_report(self._report(RESUMED_FILE))
        step = doc.get("step") if doc is not None else None
        return step if isinstance(step, int) and not isinstance(step, bool) else None

    def stored(self) -> dict[str, object] | None:
        """What the program committed straight into a store (the DCP adapter)."""
        return read_report(self._report(STORED_FILE))

    def _report(self, name: str) -> Path:
        return (self.reports or self.directory.parent) / name

    def nothing_committed(self) -> str | None:
        """Why the run has no checkpoint, in one line naming the directory watched; None
        when this attempt handed one over or the program committed into a store itself."""
        if self.handed or self.stored() is not None:
            return None
        seen = "; ".join(f"{k}: {v}" for k, v in sorted(self.skipped.items())[:3])
        return (
            f"training.command saved no checkpoint burst could commit in {self.directory} "
            "($BURST_CHECKPOINT_DIR, subdirectories included)"
            + (f"; seen there: {seen}" if seen else ": nothing was saved there")
        )

    # ---------------------------------------------------------------- scans

    def scan(self, *, final: bool = False) -> Handed | None:
        """One look; ``final``: the program has exited, nothing is being written any more, so
        an entry need not be seen twice unchanged. Returns what was handed over."""
        with self._lock:
            return self._scan(final)

    def _look(self) -> list[_Item]:
        items: list[_Item] = []
        cache: dict[str, tuple[object, Verdict | None]] = {}
        for path in candidates(self.directory, markers=True):
            rel = path.relative_to(self.directory).as_posix()
            if path.name.endswith(MARKER_SUFFIX):
                marked = path.with_name(path.name.removesuffix(MARKER_SUFFIX))
                if not marked.exists() and not marked.is_symlink():
                    self._note(rel.removesuffix(MARKER_SUFFIX), "deleted (its marker remains)")
                continue
            sig = signature(path)
            if sig is None:
                continue
            if path.is_symlink():
                target = link_target(path, self.directory)
                if target is None:
                    continue  # leads out of the directory: not the program's checkpoint
                under = os.path.normpath(PurePosixPath(rel).parent / target)
                items.append(_Item(rel, path, sig, None, PurePosixPath(under).as_posix()))
                continue
            key = (sig, _marker_key(path))
            held = self._cache.get(rel)
            if held is not None and held[0] == key:
                verdict = held[1]
            else:
                try:
                    verdict = judge(path)
                except OSError:
                    continue  # deleted under us
            cache[rel] = (key, verdict)
            items.append(_Item(rel, path, sig, verdict))
        self._cache = cache
        return items

    def _scan(self, final: bool) -> Handed | None:
        items = self._look()
        steps = {it.rel: s for it in items if (s := it.checkpoint_step) is not None}
        for it in items:  # a link has the step of the checkpoint it points at
            if it.target is not None and it.target in steps:
                steps[it.rel] = steps[it.target]
        ready: list[_Item] = []
        for it in items:
            if self._done.get(it.rel) == it.sig:
                continue
            if it.verdict is not None and not it.verdict.complete:
                self._note(it.rel, it.verdict.why)
                continue
            if it.rel not in steps:
                if it.verdict is not None:
                    self._note(it.rel, NO_STEP)
                continue  # an output: it commits when the program ends
            if not final and self._last.get(it.rel) != it.sig:
                continue  # seen changing: look again next time
            ready.append(it)
        self._last = {it.rel: it.sig for it in items}
        outs = [it for it in items if _output(it, steps)] if final and self.outputs else []
        if outs and all(self._done.get(it.rel) == it.sig for it in outs):
            outs = []  # committed already
        handed = None
        if ready:
            top = max(steps[it.rel] for it in ready)
            newest = self._newest()
            for it in ready:  # older than what is committed: superseded
                if steps[it.rel] < top or (newest is not None and top < newest):
                    self._done[it.rel] = it.sig
            if newest is None or top >= newest:
                taken = {it.rel for it in ready}
                group = [
                    it
                    for it in items
                    if steps.get(it.rel) == top
                    and (it.rel in taken or self._done.get(it.rel) == it.sig)
                ]
                handed = self._hand(top, group, outs)
                if handed is not None:
                    outs = []
        if outs:
            top2 = self._newest()
            group = [
                it
                for it in items
                if top2 is not None
                and steps.get(it.rel) == top2
                and (final or self._done.get(it.rel) == it.sig)
            ]
            handed = self._hand(top2 if top2 is not None else 0, group, outs) or handed
        return handed

    def _hand(self, step: int, group: list[_Item], outs: list[_Item]) -> Handed | None:
        """Read the entries and hand them to the writer as one checkpoint of ``step``."""
        group = sorted(group, key=_resume_order)
        members = {it.rel for it in group}
        parts: list[Part] = []
        for it in [*group, *outs]:
            part = read_part(it.path, it.rel, it.verdict)
            if isinstance(part, str):
                self._note(it.rel, part)
                continue
            if it.rel in members and part.step is None:
                part.step = step
            parts.append(part)
        if group and not any(p.name in members for p in parts):
            return None  # no entry of the checkpoint could be read: the next scan tries again
        if not parts:
            return None
        snap = Snapshot(step, parts)
        self.commit(snap)
        sigs = [p.sig for p in parts if p.kind != "link"]
        saved_at = max((newest_mtime(s) for s in sigs), default=time.time())
        handed = Handed(
            parts[0].name, step, parts[0].format, time.time(), saved_at, snap.nbytes, snap.names
        )
        self.handed.append(handed)
        for part in parts:
            self._done[part.name] = part.sig
            self.skipped.pop(part.name, None)
        return handed

    def _note(self, name: str, why: str) -> None:
        if self.skipped.get(name) != why:
            log.info("checkpoint %s not committed (yet): %s", name, why)
        self.skipped[name] = why


def _output(it: _Item, steps: dict[str, int]) -> bool:
    """One of the program's outputs: no checkpoint of a step, not known to be incomplete (a
    half-written checkpoint stays out), not a link (a link to a checkpoint goes with it)."""
    if it.rel in steps or it.target is not None:
        return False
    return it.verdict is None or it.verdict.complete


def _marker_key(path: Path) -> tuple[int, int] | None:
    try:
        st = path.with_name(path.name + MARKER_SUFFIX).stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _resume_order(it: _Item) -> tuple[bool, bool, str]:
    """The entry a resume starts from first: no link, no alias (``last.ckpt``)."""
    return it.target is not None, is_last_alias(it.path.name), it.rel
