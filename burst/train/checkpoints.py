"""The training loop's checkpoints, through the checkpoint engine (burst.checkpoint).

``RunCheckpoints`` wraps a ``CheckpointManager`` on the run's store (``storage.checkpoint_uri``
+ ``/<run-id>``, file:// or s3://) and keeps what the loop needs to plan: for each commit, how
long training was blocked (the copy into the host buffer) and how long the background upload
took. Saves are asynchronous: ``completed()`` returns the commits learned since the last call;
``commit(timeout)`` waits for the save in flight.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable
from typing import Any

import torch

from burst.checkpoint import CheckpointManager, CheckpointRef, SaveResult
from burst.checkpoint.sharded import ShardInfo
from burst.errors import CheckpointError
from burst.spec import BurstJob
from burst.storage.location import run_url

log = logging.getLogger(__name__)

NOTICE_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class RunCheckpoints:
    def __init__(self, job: BurstJob, run_id: str, shard: ShardInfo | None = None) -> None:
        """``shard``: this rank's part of a sharded checkpoint (several ranks); retention is
        rank 0's, which commits."""
        policy = job.training.checkpoint
        lead = shard is None or shard.rank == 0
        self.location = run_url(job.storage.checkpoint_uri, run_id)
        options: dict[str, Any] = {}
        if job.storage.kms_key_id and self.location.startswith("s3://"):
            options.update(sse="aws:kms", kms_key_id=job.storage.kms_key_id)
        from burst.storage import open_store

        self.mgr = CheckpointManager(
            open_store(self.location, **options),
            keep_full=policy.keep_full if lead else None,
            keep_weights=policy.keep_weights if lead else None,
            shard=shard,
        )
        self._seen: tuple[int, str] | None = None
        self._queue: list[SaveResult] = []
        self.failures: list[str] = []

    def save(self, step: int, state: dict[str, Any], tier: str) -> float:
        """Hand ``state`` to the background writer; returns the seconds training was blocked.

        A save still in flight is waited for first (one at a time); if it failed, the failure
        is logged and counted, and the checkpoint before it stands.
        """
        return self.save_via(lambda: self.mgr.save(step, state, tier))

    def save_via(self, hand_off: Callable[[], object]) -> float:
        """``save`` with the hand-off to ``self.mgr`` done by ``hand_off`` (an adapter such
        as the DeepSpeed checkpointer, which calls ``self.mgr.save`` itself)."""
        t0 = time.perf_counter()
        if self.mgr.busy():
            try:  # a newer save replaces a failed one: no retry of the old one here
                self.mgr.wait(retry=False)
            except CheckpointError as exc:
                self.failures.append(exc.one_line())
                log.warning("a background checkpoint failed: %s", exc.one_line())
        self._queue.extend(self._newest())
        if self.mgr.worker_pid is None:
            # The save starts the background writer process. It must outlive a SIGTERM or
            # SIGINT sent to the whole process group (a terminal's Ctrl-C, an init that
            # signals the group) to finish the emergency save; it exits when our pipe to it
            # closes. So it starts with those signals blocked, which it inherits; here they
            # are only held pending for the moment of the start, never lost.
            held = signal.pthread_sigmask(signal.SIG_BLOCK, NOTICE_SIGNALS)
            try:
                hand_off()
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, held)
        else:
            hand_off()
        return time.perf_counter() - t0

    def warm(self, nbytes: int) -> None:
        """Ready the host buffer (``nbytes`` of state) and the writer process in the
        background, so that the first save stalls no longer than the others."""
        self.mgr.warm(nbytes=nbytes)

    def busy(self) -> bool:
        return self.mgr.busy()

    def _newest(self) -> list[SaveResult]:
        last = self.mgr.status().last_committed
        if last is None or (last.step, last.tier) == self._seen:
            return []
        self._seen = (last.step, last.tier)
        return [last]

    def completed(self) -> list[SaveResult]:
        """Commits not reported yet, oldest first."""
        out, self._queue = [*self._queue, *self._newest()], []
        return out

    def commit(self, timeout: float | None = None) -> None:
        """Wait for the save in flight to commit; CheckpointError if it fails or times out."""
        self.mgr.wait(timeout)

    def latest(self, tier: str | None = None) -> CheckpointRef | None:
        return self.mgr.latest(tier)

    def refs(self) -> list[CheckpointRef]:
        return self.mgr.checkpoints()

    def committed(self) -> int:
        return len(self.refs())

    def restore_full(self) -> tuple[int, dict[str, Any]] | None:
        """The newest full checkpoint that restores (older ones if it is corrupt)."""
        if self.latest("full") is None:
            return None
        restored = self.mgr.restore(tier="full", fallback=True)
        return restored.step, restored.state

    def load(self, ref: CheckpointRef) -> dict[str, Any]:
        state: dict[str, Any] = self.mgr.restore(ref.step, tier=ref.tier).state
        return state

    def close(self, timeout: float | None = None) -> None:
        try:
            self.mgr.close(timeout)
        except CheckpointError as exc:
            log.warning("closing the checkpoint store: %s", exc.one_line())


def state_nbytes(state: Any) -> int:
    """Bytes of the tensors (and numpy arrays) in a nested state."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(state_nbytes(v) for v in state)
    nbytes = getattr(state, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
