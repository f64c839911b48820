"""What the provision and teardown steps call: the run's ledger, admission, settlement."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from burst.admission.admit import admit, settle
from burst.admission.ledger import Entry, Ledger, ledger_url
from burst.documents.plan import Candidate
from burst.errors import BurstError
from burst.spec import BurstJob
from burst.storage.base import StoreError

log = logging.getLogger(__name__)


def run_ledger(runs_root: Path) -> Ledger:
    return Ledger.open(ledger_url(runs_root))


def admit_run(
    job: BurstJob, run_id: str, runs_root: Path, candidates: Sequence[Candidate]
) -> Entry:
    """Provision's gate: reserve before anything is rented (BudgetRefused: exit 3)."""
    return admit(run_ledger(runs_root), job, run_id, candidates)


def settle_run(job: BurstJob, run_id: str, runs_root: Path) -> Entry | None:
    """Teardown's settlement, from the attempt records in the run's store. Never raises: a
    ledger that cannot be written is logged (the reservation then stays open, counted)."""
    from burst.storage import open_store
    from burst.storage.location import run_url
    from burst.train.attempts import read_store

    try:
        ledger = run_ledger(runs_root)
        try:
            attempts = read_store(open_store(run_url(job.storage.checkpoint_uri, run_id)))
        except (BurstError, OSError) as exc:
            log.error("cannot read the attempt records to settle the run: %s", exc)
            attempts = None
        return settle(ledger, job.team, run_id, attempts)
    except (BurstError, StoreError, OSError) as exc:
        log.error("cannot settle run %s in the team ledger: %s", run_id, exc)
        return None
