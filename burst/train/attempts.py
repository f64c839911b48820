"""The train step's own attempt record (``burst.attempt_records``): it opens the record as the
attempt starts, brings it up to date while it runs and closes it with what ended the attempt.

The records' format, their one reader and how a reader settles them are
``burst.attempt_records``, below every reader (teardown, admission, the report, ``burst
status``). A stop on request (``burst cancel`` leaves ``CANCEL_MARKER`` in the run directory;
Ctrl-C is SIGINT) closes the attempt as a cancel, which spends neither recovery budget.
"""

from __future__ import annotations

import logging
import os
import threading
from datetime import datetime
from pathlib import Path

from burst import recovery
from burst.attempt_records import (
    PREFIX,
    RUNNING,
    after_kill,
    read_file,
    read_store,
    record_json,
    settle_unclosed,
    source,
)
from burst.documents import TrainAttempt
from burst.storage.base import ObjectStore, StoreError

log = logging.getLogger(__name__)

#: Left in the run directory by ``burst cancel`` before it stops the run: the attempt the
#: stop ends is a cancel, not a preemption.
CANCEL_MARKER = "cancel-requested"


def _fresh(marker: Path, started_at: str | None) -> bool:
    """A cancel marker left while this attempt ran (one older than its start, whole
    seconds, was left by a stop of an earlier run of the same id)."""
    try:
        left = marker.stat().st_mtime
    except OSError:
        return False
    if started_at is None:
        return True
    try:
        start = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return True
    return left >= int(start)


class AttemptLog:
    def __init__(self, path: Path, store: ObjectStore | None = None) -> None:
        self.path = path
        self.store = store
        # updates come from the lease renewer's thread: none may land after the close
        self._lock = threading.Lock()
        self._closed = False
        #: records :meth:`past` found left open (attempts that died), as it settled them
        self._dead: list[TrainAttempt] = []

    def read(self) -> list[TrainAttempt]:
        records = read_store(self.store) if self.store is not None else []
        return records or read_file(self.path)

    def _put(self, record: TrainAttempt) -> str:
        text = record_json(record)
        if self.store is None:
            return text
        key = f"{PREFIX}{int(record.attempt or 0):04d}.json"
        try:
            self.store.put_bytes(key, text.encode())
        except StoreError as exc:
            log.warning("cannot record the attempt in %s: %s", self.store.url, exc.one_line())
        return text

    def past(self, *, after_restart: bool = False, restarts: int = 1) -> list[TrainAttempt]:
        """The earlier attempts as a new one sees them (settled; after a restart, the killed
        train's record is a failure); a cancel marker left by an earlier stop is spent."""
        raw = self.read()
        records = settle_unclosed(raw)
        if after_restart:
            records = after_kill(records, restarts)
        self._dead = [
            settled
            for before, settled in zip(raw, records, strict=True)
            if before.outcome in (None, RUNNING)
        ]
        return records

    def close_dead(self) -> None:
        """Close, in the store and the local copy, the records :meth:`past` found left open,
        as it settled them (died, killed, a lost node; after a restart the killed train, a
        failure): their attempts are gone (this one holds the run's lease), and every later
        reader (the report, its recovery split, ``burst status``, teardown's settlement)
        then reads one truth instead of settling them again with less to go on. The
        attempt's leader calls it once, before it opens its own record."""
        for record in self._dead:
            text = self._put(record)
            self._append_local(text)
        self._dead = []

    def _labelled(self, record: TrainAttempt) -> TrainAttempt:
        """The closing record with what ended it (a stop on request: a cancel)."""
        label = source(record)
        marker = self.path.parent / CANCEL_MARKER
        if record.outcome == "preempted" and _fresh(marker, record.started_at):
            label = recovery.CANCEL
            marker.unlink(missing_ok=True)  # spent: a later preemption is one
        return record.model_copy(update={"recovery_source": label})

    def begin(self, record: TrainAttempt) -> None:
        """Open the attempt's record (``outcome: running``) as it starts."""
        self._put(record.model_copy(update={"outcome": RUNNING}))

    def update(self, record: TrainAttempt) -> None:
        """Bring the open record up to date (still ``running``); nothing once it is closed."""
        with self._lock:
            if not self._closed:
                self._put(record.model_copy(update={"outcome": RUNNING}))

    def append(self, record: TrainAttempt) -> None:
        """Close the attempt's record (its final outcome) and keep a local copy."""
        with self._lock:
            self._closed = True
            labelled = self._labelled(record)
            record.recovery_source = labelled.recovery_source  # the caller's record says it too
            text = self._put(labelled)
        self._append_local(text)

    def _append_local(self, text: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
