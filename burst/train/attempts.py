"""The record of every attempt of a run's train step (``burst.documents.TrainAttempt``).

One JSON object per attempt, written when the attempt starts (``outcome: running``), brought
up to date while it runs (``last_seen_at``, the step reached, its cost so far: every lease
renewal) and closed when it ends (done, preempted, failed). A record still ``running`` when
the next attempt (or the report) reads it belongs to an attempt that died without closing
it (SIGKILL, node loss): it counts as a killed attempt, with the cost it had reached, and
its number is never used again. The last attempt's document lists them all: where each
resumed from, whether it was preempted or killed, what the emergency save chose, and the
costs it measured (the next attempt starts from those measurements).

The records live in the run's checkpoint store under ``ATTEMPTS_PREFIX``
(``train/attempts/<NNNN>.json``: every pod of a run sees the same store, whereas each pod has
its own run directory), and a copy is appended to ``runs/<run-id>/train-attempts.jsonl`` for
the local run directory. This module is their one reader: the train step, teardown's
checkpoint sync (``burst.infra.ckptsync``) and the run view read them here. A record that is
not one (cut by a kill mid-write, or of another shape) is skipped with a warning.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path

from burst.documents import (
    ATTEMPTS_FILE,
    ATTEMPTS_PREFIX,
    DocumentError,
    TrainAttempt,
    parse_document,
    produce,
)
from burst.storage.base import ObjectStore, StoreError

log = logging.getLogger(__name__)

FILE_NAME = ATTEMPTS_FILE
PREFIX = ATTEMPTS_PREFIX


def _parse(text: str | bytes, where: str) -> TrainAttempt | None:
    try:
        return parse_document(TrainAttempt, json.loads(text), where)
    except (ValueError, DocumentError) as exc:
        # json's errors are ValueErrors; a DocumentError names the field
        what = exc.one_line() if isinstance(exc, DocumentError) else exc.__class__.__name__
        log.warning("%s: not an attempt record (%s), skipped", where, what)
        return None


def read_store(store: ObjectStore) -> list[TrainAttempt]:
    """The attempt records in a run's checkpoint store, oldest first."""
    out = []
    for info in sorted(store.list(PREFIX), key=lambda i: i.key):
        try:
            data = store.get_bytes(info.key)
        except StoreError as exc:
            log.warning("%s/%s: unreadable attempt record (%s)", store.url, info.key, exc)
            continue
        rec = _parse(data, f"{store.url}/{info.key}")
        if rec is not None:
            out.append(rec)
    return out


def read_file(path: Path) -> list[TrainAttempt]:
    """The attempt records of a run directory's ``train-attempts.jsonl``, oldest first."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip() and (rec := _parse(line, f"{path}:{n}")) is not None:
            out.append(rec)
    return out


RUNNING = "running"
DIED = "died"


def settle_unclosed(records: list[TrainAttempt]) -> list[TrainAttempt]:
    """Records as the next reader must see them: one left ``running`` is an attempt that
    died (nobody else may train the run while its lease is live), counted as killed."""
    out = []
    for rec in records:
        if rec.outcome in (None, RUNNING):
            rec = rec.model_copy(
                update={
                    "outcome": DIED,
                    "preempted": True,
                    "killed": True,
                    "ended_at_step": rec.at_step,
                    "finished_at": rec.last_seen_at,
                }
            )
        out.append(rec)
    return out


def next_number(records: list[TrainAttempt]) -> int:
    numbers = [r.attempt for r in records if r.attempt is not None]
    return max([0, len(records), *numbers]) + 1


def record_json(record: TrainAttempt) -> str:
    """The JSON text of a record as it is written (the boundary: checked against the
    model once more, keys sorted)."""
    return json.dumps(
        produce(TrainAttempt, record.to_json()).to_json(), sort_keys=True, default=str
    )


class AttemptLog:
    def __init__(self, path: Path, store: ObjectStore | None = None) -> None:
        self.path = path
        self.store = store
        # updates come from the lease renewer's thread: none may land after the close
        self._lock = threading.Lock()
        self._closed = False

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
            text = self._put(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(text + "\n")
            f.flush()
            os.fsync(f.fileno())
