"""How one attempt of the train step ends, written once for every mode.

The built-in loop (``burst.train.loop``), its final commit (``burst.train.wrapup``), the
emergency save (``burst.train.preemption``) and a user's own program under the supervisor
(``burst.program.supervise``) all end an attempt through these functions, so an ending means
the same in every mode and a fix to one reaches the others:

============== ============ ====== ===================================================
ending         outcome      exit   what it means
============== ============ ====== ===================================================
``done``       done         0      the last step trained and its checkpoint committed
``preempted``  preempted    75     a stop notice: what fitted was saved; requeue
``lost_save``  final-save-  75     the last checkpoint did not commit: requeue from the
               lost                one before
``over_budget`` budget-     3      budget.max_usd / max_hours reached, the work kept
               exceeded
``store_down`` store-down   4      the store refused every save for longer than the
                                   retry window (infrastructure: the pipeline retries)
============== ============ ====== ===================================================

Each records the outcome in the attempt record, closes it, and raises the step's error with
the step document attached (``BurstError.doc``: ``burst.stepio`` writes it) or returns the
document. A user's program that exits non-zero fails the step with its own code
(``ProgramFailed``, raised by the supervisor). The run-level endings (what ``burst run`` and
``burst status`` say) are ``burst.endings``, decided from these outcomes and exit codes.
"""

from __future__ import annotations

import logging
from typing import Any, NoReturn

from burst.budget import BudgetExceeded
from burst.documents import TrainDocument
from burst.errors import BurstError, Preempted
from burst.train.checkpoints import RunCheckpoints, StoreDown
from burst.train.records import AttemptRecords

log = logging.getLogger(__name__)


class ProgramFailed(BurstError):
    """A user's program (``training.command``) exited non-zero: the step fails with its
    code (not requeued)."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def done(records: AttemptRecords, store: RunCheckpoints, step: int, **extra: Any) -> TrainDocument:
    """The attempt trained to ``step`` and its last checkpoint committed."""
    records.record.outcome = "done"
    records.record.ended_at_step = step
    records.finish(store)
    return records.doc(store, step, **extra)


def preempted(records: AttemptRecords, store: RunCheckpoints, step: int, message: str) -> NoReturn:
    """A stop notice ended the attempt at ``step`` (the caller recorded the notice and the
    save); exit 75: requeued, the next attempt resumes from the last committed checkpoint."""
    records.record.outcome = "preempted"
    records.record.preempted = True
    records.record.ended_at_step = step
    records.finish(store)
    stop = Preempted(message)
    stop.doc = records.doc(store, step)
    raise stop


def lost_save(
    records: AttemptRecords,
    store: RunCheckpoints,
    step: int,
    problem: str,
    what: str | None = None,
) -> NoReturn:
    """The attempt's last checkpoint (``what``; by default the final one, of ``step``) did
    not commit (``problem``): exit 75, requeued, it resumes from the last committed one (an
    infrastructure fault, never bad input)."""
    records.record.outcome = "final-save-lost"
    records.record.ended_at_step = step
    records.record.error = problem
    records.finish(store)
    stop = Preempted(
        f"{what or f'the final checkpoint (step {step})'} did not commit: {problem}; exit 75 "
        "to requeue from the last committed one"
    )
    stop.doc = records.doc(store, step)
    raise stop


def over_budget(
    records: AttemptRecords, store: RunCheckpoints, exc: BudgetExceeded, step: int
) -> NoReturn:
    """The budget stopped the attempt at ``step``, its work kept (the caller saved it): exit 3
    and teardown follows; a larger budget resumes it."""
    records.learn(store)
    records.record.outcome = "budget-exceeded"
    records.record.ended_at_step = step
    records.record.error = exc.message
    records.finish(store)
    exc.doc = records.doc(store, step)
    raise exc


def store_down(records: AttemptRecords, store: RunCheckpoints, why: str, step: int) -> NoReturn:
    """The store refused every save for longer than the retry window (``why``), so nothing
    trained from here could be kept: stop at ``step``. The committed work stands; exit 4 (an
    infrastructure fault: the pipeline retries the step, which resumes from it)."""
    message = (
        f"{why}; training stopped at step {step}; the last committed checkpoint: "
        f"{store.last_commit()} (resumed from step {records.record.resumed_from})"
    )
    log.error("%s", message)
    records.learn(store)
    records.record.outcome = "store-down"
    records.record.ended_at_step = step
    records.record.error = message
    records.finish(store)
    stop = StoreDown(message, where=store.location)
    stop.doc = records.doc(store, step)
    raise stop


def final_store_down(
    records: AttemptRecords, store: RunCheckpoints, step: int, problem: str
) -> NoReturn:
    """The last checkpoint (``step``) did not commit because the store is down for good:
    exit 4, the store not asked again."""
    message = (
        f"the final checkpoint (step {step}) did not commit: {problem}; the last "
        f"committed checkpoint: {store.last_commit()}; exit 4 (the store is down)"
    )
    log.error("%s", message)
    records.record.outcome = "store-down"
    records.record.ended_at_step = step
    records.record.error = message
    records.finish(store)
    stop = StoreDown(message, where=store.location)
    stop.doc = records.doc(store, step)
    raise stop
