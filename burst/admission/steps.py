"""What the provision and teardown steps (and ``burst down`` / ``burst reap``) call: the run's
ledger, admission, settlement. Every ending settles: teardown settles a run that ended
(succeeded, failed, cancelled, preempted, budget-stopped); a run whose runner was killed has
no teardown, so ``burst down`` and ``burst reap`` settle it (ending ``reaped``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from burst.admission.admit import admit, settle
from burst.admission.ledger import Entry, Ledger, ledger_url
from burst.documents.plan import Candidate
from burst.documents.train import TrainAttempt
from burst.errors import BurstError
from burst.spec import BurstJob
from burst.storage.base import StoreError, StoreOpener

log = logging.getLogger(__name__)


def run_ledger(runs_root: Path) -> Ledger:
    return Ledger.open(ledger_url(runs_root))


def queue_wait_s(job: BurstJob) -> float:
    """How long a queued run may wait for admission: its deadline (``budget.max_hours``, on
    the clock the budget guard uses: ``BURST_BUDGET_TIME_SCALE`` shortens it)."""
    from burst.budget import time_scale

    return float(job.budget.max_hours) * 3600.0 / max(time_scale(), 1e-9)


def admit_run(
    job: BurstJob, run_id: str, runs_root: Path, candidates: Sequence[Candidate]
) -> Entry:
    """Provision's gate: reserve before anything is rented; a run whose team's open
    reservations hold its budget waits queued (renting nothing) up to its deadline
    (BudgetRefused: exit 3)."""
    return admit(run_ledger(runs_root), job, run_id, candidates, wait_s=queue_wait_s(job))


def _attempts(
    checkpoint_uri: str, run_id: str, store: StoreOpener | None = None
) -> list[TrainAttempt] | None:
    from burst.attempt_records import read_store
    from burst.storage import open_store
    from burst.storage.location import run_url

    try:
        return read_store(store() if store else open_store(run_url(checkpoint_uri, run_id)))
    except (BurstError, StoreError, OSError) as exc:
        log.error("cannot read the attempt records to settle the run: %s", exc)
        return None


def settle_run(
    job: BurstJob,
    run_id: str,
    runs_root: Path,
    ending: str | None = None,
    *,
    store: StoreOpener | None = None,
) -> Entry | None:
    """Teardown's settlement, from the attempt records in the run's store (``store``: where
    the run's train step kept them when that is not the spec's store under the run id, as for
    a region's branch; records that cannot be read charge the reservation in full). Never
    raises: a ledger that cannot be written is logged (the reservation then stays open,
    counted)."""
    try:
        ledger = run_ledger(runs_root)
        attempts = _attempts(job.storage.checkpoint_uri, run_id, store)
        return settle(ledger, job.team, run_id, attempts, ending=ending)
    except (BurstError, StoreError, OSError) as exc:
        log.error("cannot settle run %s in the team ledger: %s", run_id, exc)
        return None


def settle_reaped(run_id: str, runs_root: Path, ledger: Ledger | None = None) -> Entry | None:
    """Settle a run whose runner died before its teardown (``burst down``, ``burst reap``):
    found by its id in the ledger, charged from its attempt records when its run directory
    has its spec (else its reservation in full), ending ``reaped``; on a cluster with Kueue
    its Workload is deleted too (the quota it held). Never raises."""
    from burst.runs import RunPaths
    from burst.spec import load_spec

    _release_workload(run_id)
    try:
        ledger = ledger or run_ledger(runs_root)
        held = ledger.find(run_id)
        if held is None or held.state not in ("admitted", "queued"):
            return None
        spec = RunPaths(runs_root, run_id).spec
        attempts = None
        if spec.is_file():
            try:
                attempts = _attempts(load_spec(spec).storage.checkpoint_uri, run_id)
            except BurstError as exc:
                log.error("cannot read run %s's spec to settle it: %s", run_id, exc)
        return settle(ledger, held.team, run_id, attempts, ending="reaped")
    except (BurstError, StoreError, OSError) as exc:
        log.error("cannot settle run %s in the team ledger: %s", run_id, exc)
        return None


def _release_workload(run_id: str) -> None:
    """A reaped run's Kueue Workload (``burst.admission.kueue_workload``): deleted, so its
    team's quota is free again; an API server that cannot be read is logged, not raised (the
    reaper's next pass tries again)."""
    from burst.admission.kueue_workload import release_quota

    try:
        release_quota(run_id)
    except BurstError as exc:
        log.error("cannot release run %s's Kueue Workload: %s", run_id, exc.one_line())
