"""Confirm the final checkpoint sync before the node group goes.

The train step's checkpoint writer uploads in the background: a preempted or stopped attempt
may leave its last save still on its way to the store when teardown starts, and destroying the
node group would kill that upload. Teardown reads the train attempts' records (kept in the
run's store, so this works from any pod) for the step whose checkpoint should become durable,
and waits, bounded, until the store holds a committed checkpoint at that step or later.

The manifest alone proves nothing: the final checkpoint's every chunk is read back and checked
against its blake3 (a corrupt one is quarantined), and the sync is confirmed only if it
verifies; otherwise the document names the newest checkpoint that does.

Destroying always goes ahead afterwards (a rented GPU must not keep running), but an
unconfirmed sync is reported loudly in the teardown document.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from burst.attempt_records import read_store
from burst.checkpoint.catalog import latest_checkpoint, list_checkpoints
from burst.checkpoint.verify import newest_restorable, verify_checkpoint
from burst.documents import TrainAttempt, parse_document
from burst.errors import BurstError
from burst.spec import BurstJob
from burst.storage import open_store
from burst.storage.base import StoreError, StoreOpener
from burst.storage.location import run_url

log = logging.getLogger(__name__)

DEFAULT_WAIT_S = 120.0


def sync_wait_s() -> float:
    from burst.settings import current

    return current().sync_wait_s


def expected_step(records: Sequence[TrainAttempt | dict[str, Any]]) -> int | None:
    """The step whose checkpoint the last attempt left to become durable: a save in flight
    or committed at the emergency, or the final one of a finished attempt."""
    if not records:
        return None
    last = parse_document(TrainAttempt, records[-1], "the last attempt record")
    save = last.emergency_save
    steps = [save.in_flight_step, save.committed_step] if save is not None else []
    if last.outcome == "done" and last.commits != 0:
        # (one that committed nothing itself leaves nothing on its way: the store decides)
        steps.append(last.ended_at_step)
    if last.outcome in (None, "running", "died", "failed"):
        # killed, or failed: the last save it handed to its writer (which outlives a killed
        # trainer and finishes the save in hand)
        steps.append(last.saving_step)
    known = [s for s in steps if isinstance(s, int)]
    return max(known) if known else None


def confirm_checkpoint_sync(
    job: BurstJob,
    run_id: str,
    *,
    wait_s: float | None = None,
    poll_s: float = 1.0,
    store_of: StoreOpener | None = None,
) -> dict[str, Any]:
    wait_s = sync_wait_s() if wait_s is None else wait_s
    started = time.monotonic()
    try:
        # where the run's train step keeps its checkpoints (``store_of``: a region's branch)
        store = store_of() if store_of else open_store(run_url(job.storage.checkpoint_uri, run_id))
        url = store.url
        records = read_store(store)
        want = expected_step(records)
        latest = latest_checkpoint(store)
        if want is None and latest is not None:
            want = latest.step  # no record names a step: what the store holds is what counts
        # a failed attempt closed its writer (one whose program committed nothing fails too):
        # nothing is on its way, do not wait for it
        if records and records[-1].outcome == "failed":
            wait_s = 0.0
        while want is not None and (latest is None or latest.step < want):
            if time.monotonic() - started >= wait_s:
                break
            time.sleep(poll_s)
            latest = latest_checkpoint(store)
    except (BurstError, StoreError, OSError) as exc:
        log.error("cannot confirm the checkpoint sync: %s", exc)
        return {"confirmed": False, "error": str(exc), "waited_s": 0.0}
    confirmed: bool | None = latest is not None and want is not None and latest.step >= want
    if want is None and latest is None:
        confirmed = None  # no train attempt, no checkpoint: nothing to sync (not "confirmed")
    doc: dict[str, Any] = {
        "store": url,
        "expected_step": want,
        "latest": None if latest is None else {"step": latest.step, "tier": latest.tier},
        "confirmed": confirmed,
    }
    if latest is not None:
        # The manifest is not the checkpoint: read back every chunk of the final one.
        try:
            check = verify_checkpoint(store, latest)
        except (BurstError, OSError) as exc:
            doc.update(
                confirmed=False,
                verified=False,
                error=exc.one_line() if isinstance(exc, BurstError) else str(exc),
            )
        else:
            doc["verified"] = check.ok
            if not check.ok:
                doc["confirmed"] = confirmed = False
                doc["error"] = check.problem()
                older = [r for r in list_checkpoints(store) if r != latest]
                good, _ = newest_restorable(store, older)
                doc["restorable"] = None if good is None else {"step": good.step, "tier": good.tier}
                log.error(
                    "%s in %s: the run resumes from %s",
                    check.problem(),
                    url,
                    "scratch" if good is None else f"step {good.step}",
                )
    doc["waited_s"] = round(time.monotonic() - started, 3)
    if not confirmed and "verified" not in doc:
        log.error(
            "checkpoint at step %s is not in %s after %.0f s: destroying anyway; the run "
            "resumes from step %s",
            want,
            url,
            wait_s,
            None if latest is None else latest.step,
        )
    return doc
