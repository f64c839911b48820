"""The record of every attempt of a run's train step (``burst.documents.TrainAttempt``): where
it lives, its one reader, and how a reader settles it.

One JSON object per attempt, written when the attempt starts (``outcome: running``), brought
up to date while it runs (``last_seen_at``, the step reached, its cost so far: every lease
renewal) and closed when it ends (done, preempted, failed); the train step writes it
(``burst.train.attempts.AttemptLog``). A record still ``running`` when the next attempt (or
the report) reads it belongs to an attempt that died without closing it (SIGKILL, node
loss): it counts as a killed attempt, with the cost it had reached, and its number is never
used again. The last attempt's document lists them all: where each resumed from, whether it
was preempted or killed, what the emergency save chose, and the costs it measured (the next
attempt starts from those measurements).

The records live in the run's checkpoint store under ``ATTEMPTS_PREFIX``
(``train/attempts/<NNNN>.json``: every pod of a run sees the same store, whereas each pod has
its own run directory), and a copy is appended to ``runs/<run-id>/train-attempts.jsonl`` for
the local run directory. This module is their one reader: the train step, teardown's
checkpoint sync (``burst.infra.ckptsync``), admission's settlement, ``burst status`` and the
run view read them here. A record that is not one (cut by a kill mid-write, or of another
shape) is skipped with a warning.

Every closed record says what ended it (``recovery_source``, ``burst.recovery.source_of``):
a provider's notice is a preemption, a record left open a lost node (or, when the placement
after it was a restart, a killed train: a failure), a stop on request a cancel, which spends
neither recovery budget.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from burst import recovery
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
                    "recovery_source": recovery.NODE_LOSS,
                }
            )
        out.append(rec)
    return out


def source(rec: TrainAttempt) -> str | None:
    """What ended an attempt (``burst.recovery.SOURCES``), from its record."""
    notice = rec.notice.source if rec.notice is not None else None
    return recovery.source_of(rec.outcome, notice, rec.recovery_source)


def sources(records: list[TrainAttempt]) -> list[str | None]:
    return [source(r) for r in records]


#: Outcomes after which the pipeline does not carry the run on (only ``burst resume`` does):
#: the recovery budgets count the attempts after the last of them, or after a cancel.
RUN_ENDING: frozenset[str | None] = frozenset({"done", "budget-exceeded", "failed"})


def budget_sources(records: list[TrainAttempt]) -> list[str | None]:
    """What ended the attempts that spend this run's recovery budgets: those since the run
    last ended (finished, stopped by its money or time budget, failed outright, cancelled),
    so a ``burst resume`` starts with both budgets whole."""
    labels = sources(records)
    start = 0
    for i, (rec, label) in enumerate(zip(records, labels, strict=True)):
        if rec.outcome in RUN_ENDING or label == recovery.CANCEL:
            start = i + 1
    return labels[start:]


def after_kill(records: list[TrainAttempt], restarts: int = 1) -> list[TrainAttempt]:
    """Records as an attempt of a *restart* placement (train killed: exit 137) sees them:
    the last one that died without closing its record was that killed train, a failure.
    ``restarts``: the restart placements of the run so far (the provision document's
    ``recovery.restarts``); each accounts for one kill, so once as many dead records are
    failures, a later attempt of the same placement (a retry in place after a lost node)
    relabels nothing: the kill was its placement's first attempt's to close."""
    out = list(records)
    failures = sum(1 for r in out if r.outcome == DIED and r.recovery_source == recovery.FAILURE)
    if failures >= restarts:
        return out
    for i in range(len(out) - 1, -1, -1):
        if out[i].outcome == DIED:
            if out[i].recovery_source == recovery.NODE_LOSS:
                out[i] = out[i].model_copy(update={"recovery_source": recovery.FAILURE})
            break
    return out


def cancelled_last(records: list[TrainAttempt]) -> list[TrainAttempt]:
    """Records of a run that ended cancelled (``burst.endings``): its last attempt, stopped
    by the stop's SIGTERM, was a cancel (on Argo the pod cannot tell a stop from an
    eviction; the workflow's ending can)."""
    out = list(records)
    if out and out[-1].outcome in ("preempted", DIED, None, RUNNING):
        out[-1] = out[-1].model_copy(update={"recovery_source": recovery.CANCEL})
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


def recoveries(records: list[TrainAttempt], *, cancelled: bool = False) -> list[dict[str, object]]:
    """Each attempt, what ended it and which budget that spent, as ``burst status`` and the
    report show them (``cancelled``: the run ended on a stop request)."""
    settled = settle_unclosed(records)
    if cancelled:
        settled = cancelled_last(settled)
    out: list[dict[str, object]] = []
    for n, rec in enumerate(settled, 1):
        src = source(rec)
        budget = (
            "max_preemptions"
            if src in recovery.PREEMPTION_BUDGET
            else "max_failures"
            if src in recovery.FAILURE_BUDGET
            else None
        )
        out.append(
            {
                "attempt": rec.attempt or n,
                "outcome": rec.outcome,
                "recovery_source": src,
                "budget": budget,
                "ended_at_step": rec.ended_at_step,
            }
        )
    return out
