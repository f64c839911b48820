"""The end of a training run that reached its last step: the final commit (or exit 75 when
it did not commit), garbage collection of sharded checkpoints, replication to a second store."""

from __future__ import annotations

import logging
from typing import Any

from burst.checkpoint.verify import verify_checkpoint
from burst.errors import BurstError, CheckpointError
from burst.spec import BurstJob
from burst.storage import open_store
from burst.storage.base import StoreError
from burst.storage.location import run_url
from burst.train import endings
from burst.train.checkpoints import RunCheckpoints
from burst.train.ranks import Ranks
from burst.train.records import AttemptRecords

log = logging.getLogger(__name__)


def final_commit(store: RunCheckpoints, total: int, ranks: Ranks, records: AttemptRecords) -> None:
    """Wait for the last save, within what is left of the retry window (it started at the
    first failure since the last commit: a final save after failed routine ones gets no fresh
    window). A worker that died after committing it (its reply lost) is no failure: the
    store says what committed (rank 0's store, for every rank). If the final checkpoint did
    not commit, the attempt ends with exit 75: requeued, it resumes from the last committed
    one (an infrastructure fault, never bad input); if the store failed every save for the
    whole window, with exit 4 (``StoreDown``, outcome ``store-down``), the store not asked
    again."""
    down = False
    try:
        store.commit()
        failed: str | None = None
    except StoreError as exc:  # the retry window is spent: the store is down
        failed, down = exc.one_line(), True
    except CheckpointError as exc:
        failed = exc.one_line()

    def verdict() -> tuple[str, bool] | None:
        last = store.mgr.status().last_committed
        if last is not None and last.step == total and last.tier == "full":
            return None
        if down:  # asking the store that just failed for a whole window would wait again
            return failed or "the checkpoint store is down", True
        latest = store.durable("full")  # (a memory tier's copy alone is not the result)
        if latest is not None and latest.step == total:
            if failed:
                log.warning("%s; the final checkpoint committed nevertheless", failed)
            return None
        return failed or f"no full checkpoint of the last step {total} in the store", False

    decided = ranks.decide(verdict)
    if decided is None:
        return
    problem, store_down = decided
    if store_down:
        endings.final_store_down(records, store, total, problem)
    endings.lost_save(records, store, total, problem)


def collect_garbage(store: RunCheckpoints, ranks: Ranks) -> None:
    """Sharded: chunks of expired checkpoints go now, every rank's writer idle (none deletes
    chunks while another rank may be uploading; see burst.checkpoint.worker)."""
    ranks.barrier()
    if not ranks.leader:
        return
    try:
        res = store.mgr.collect_garbage(grace=0.0, retention=False)
    except CheckpointError as exc:
        log.warning("GC of the sharded checkpoints failed: %s", exc.one_line())
        return
    log.info("GC after the run: %d unreferenced chunks removed", res["deleted_chunks"])


def replicate(job: BurstJob, run_id: str, store: RunCheckpoints) -> dict[str, Any] | None:
    """Copy the final checkpoint to the second store (``storage.replica_uri``, e.g. another
    region), checksums verified on arrival; only the chunks it lacks travel. A failure is
    returned and logged loudly: the training itself is done and safe in the first store.
    Returns the record's ``replica`` entry (None: nothing to replicate)."""
    replica = job.storage.replica_uri
    url = run_url(replica, run_id) if replica else None
    latest = store.durable()  # (what the store holds: the replication's source)
    if url is None or latest is None:
        return None
    try:
        res = store.mgr.replicate_to(url, steps=[latest.step])
        # The claim "a second copy exists" rests on reading it back: chunks the replica
        # already held were not copied, so every chunk of the copy is checked there.
        check = verify_checkpoint(open_store(url), latest)
        if not check.ok:
            raise CheckpointError(f"the copy does not verify: {check.problem()}", where=url)
    except (CheckpointError, BurstError, OSError) as exc:
        log.error("replication to %s failed: %s", url, exc)
        return {"store": url, "step": latest.step, "error": str(exc)}
    log.info("checkpoint %d replicated to %s (%d bytes sent)", latest.step, url, res.copied_bytes)
    return {
        "store": url,
        "step": latest.step,
        "copied_chunks": res.copied_chunks,
        "copied_bytes": res.copied_bytes,
        "verified": True,
    }
