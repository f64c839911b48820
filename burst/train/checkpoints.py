"""The training loop's checkpoints, through the checkpoint engine (burst.checkpoint).

``RunCheckpoints`` wraps a ``CheckpointManager`` on the run's store (``storage.checkpoint_uri``
+ ``/<run-id>``, file:// or s3://) and keeps what the loop needs to plan: for each commit, how
long training was blocked (the copy into the host buffer) and how long the background upload
took. Saves are asynchronous: ``completed()`` returns the commits learned since the last call;
``commit(timeout)`` waits for the save in flight.

No wait here outlasts a preemption notice: once the loop has a stop notice, ``bound`` caps
every wait at its deadline (less the reserve for exiting), and a routine save that waits for
the save before it gives up as soon as a stop notice arrives (``SaveAbandoned``: the loop then
acts on the notice). A slow upload during a reclaim can then never hold the process past its
grace period: the checkpoint before it stands, or the one in flight commits on its own.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any

from burst.checkpoint import CheckpointManager, CheckpointRef, SaveResult
from burst.checkpoint.catalog import latest_checkpoint
from burst.checkpoint.sharded import ShardInfo
from burst.errors import CheckpointError
from burst.preempt.notice import NoticeBoard
from burst.spec import BurstJob
from burst.storage.base import ObjectStore, StoreError
from burst.storage.location import run_url
from burst.train.tiers import RankTiers

log = logging.getLogger(__name__)

NOTICE_SIGNALS = {signal.SIGTERM, signal.SIGINT}
#: how often a wait for the save in flight looks at the notice board
WAIT_SLICE_S = 0.25
#: the shortest wait for a commit, even past the bound
MIN_WAIT_S = 0.05


class SaveAbandoned(CheckpointError):
    """A save not handed to the writer: the save before it was still in flight when the wait
    had to end (a stop notice, or its deadline). The last committed checkpoint stands."""


class StoreDown(StoreError):
    """Training stopped: the store refused every save for longer than the retry window
    (exit 4, infrastructure: a retry resumes from the last committed checkpoint)."""


class RunCheckpoints:
    def __init__(
        self,
        job: BurstJob,
        run_id: str,
        shard: ShardInfo | None = None,
        store: ObjectStore | None = None,
        tiers: RankTiers | None = None,
    ) -> None:
        """``shard``: this rank's part of a sharded checkpoint (several ranks); retention is
        rank 0's, which commits. ``store``: the run's store when it is not the spec's
        ``storage.checkpoint_uri`` (a regional worker's own region store). ``tiers``: this
        rank's memory tiers (``burst.train.tiers``; docs/checkpoints.md, "Tiers")."""
        policy = job.training.checkpoint
        lead = shard is None or shard.rank == 0
        if store is None:
            self.location = run_url(job.storage.checkpoint_uri, run_id)
            options: dict[str, Any] = {}
            if job.storage.kms_key_id and self.location.startswith("s3://"):
                options.update(sse="aws:kms", kms_key_id=job.storage.kms_key_id)
            from burst.storage import open_store

            store = open_store(self.location, **options)
        else:
            self.location = store.url
        self.mgr = CheckpointManager(
            store,
            keep_full=policy.keep_full if lead else None,
            keep_weights=policy.keep_weights if lead else None,
            shard=shard,
            local=tiers.local if tiers is not None else None,
            peers=tiers.peers if tiers is not None else (),
            store_every=tiers.store_every if tiers is not None else 1,
            rank_tiers=tiers.every_rank if tiers is not None and shard is not None else None,
        )
        if tiers is not None:
            log.info(
                "memory tiers: local %s, peer %s; the store every %d save(s)",
                tiers.local,
                ",".join(tiers.peers) or "none (one node)",
                tiers.store_every,
            )
        self.last_step = job.training.steps
        #: the tier the restore at start-up read ("local", "peer", "store"; None: none)
        self.restored_from: str | None = None
        self._seen: tuple[int, str] | None = None
        self._queue: list[SaveResult] = []
        self.failures: list[str] = []
        # since when (monotonic) saves fail with no commit since, and the first failure
        self._failing_since: float | None = None
        self._first_failure = ""
        # set by the loop: a stop notice on this board ends a routine save's wait
        self.board: NoticeBoard | None = None
        # time.time() past which no wait here goes (a stop notice's deadline less the reserve)
        self.deadline: float | None = None
        # a stop notice's deadline, for the saves handed over from now on (``arm``)
        self.armed: float | None = None

    @contextlib.contextmanager
    def bound(self, deadline: float | None) -> Iterator[None]:
        """Within: no wait for a save in flight goes past ``deadline`` (time.time())."""
        held, self.deadline = self.deadline, deadline
        try:
            yield
        finally:
            self.deadline = held

    def arm(self, deadline: float | None) -> None:
        """No save handed over from now on commits past ``deadline`` (a stop notice's,
        time.time()): the writer refuses its manifest then (``CheckpointManager.commit_by``),
        and the checkpoint before stands. A save already in flight is not refused: it was
        handed over before the notice, and what it commits is as whole as it was going to be;
        refusing it lost a routine save that landed a moment after a short grace's deadline
        (e0ff626). The writer learns the deadline once that save is done, just before the
        next hand-off."""
        self.armed = deadline

    def seconds_left(self) -> float | None:
        """Seconds to the bound (never negative); None without one."""
        return None if self.deadline is None else max(0.0, self.deadline - time.time())

    def _wait_previous(self) -> None:
        """Wait for the save in flight before handing over the next: until it is done, the
        bound passes, or (a routine save) a stop notice arrives: ``SaveAbandoned``."""
        while self.mgr.busy():
            left = self.seconds_left()
            if left is not None and left <= 0:
                step = self.mgr.status().in_flight
                raise SaveAbandoned(
                    f"the save of step {step} was still in flight at the notice's deadline",
                    where=self.location,
                )
            if left is None and self.board is not None and self.board.stop_notice() is not None:
                raise SaveAbandoned(
                    "a stop notice arrived while the save before was in flight",
                    where=self.location,
                )
            down = self.down_for_good()
            if down is not None:
                raise SaveAbandoned(down, where=self.location)
            self.mgr.idle(WAIT_SLICE_S if left is None else min(WAIT_SLICE_S, left))

    def save(self, step: int, state: dict[str, Any], tier: str) -> float:
        """Hand ``state`` to the background writer; returns the seconds training was blocked.

        A save still in flight is waited for first (one at a time); if it failed, the failure
        is logged and counted, and the checkpoint before it stands. With memory tiers, the
        last step's save goes to the store whatever ``store_every`` says (the run's result
        is durable).
        """
        durable = True if step >= self.last_step else None
        return self.save_via(lambda: self.mgr.save(step, state, tier, store=durable))

    def save_via(self, hand_off: Callable[[], object]) -> float:
        """``save`` with the hand-off to ``self.mgr`` done by ``hand_off`` (an adapter such
        as the DeepSpeed checkpointer, which calls ``self.mgr.save`` itself)."""
        t0 = time.perf_counter()
        if self.mgr.busy():
            self._wait_previous()
            try:  # a newer save replaces a failed one: no retry of the old one here
                self.mgr.wait(retry=False)
            except CheckpointError as exc:
                self.failures.append(exc.one_line())
                log.warning("a background checkpoint failed: %s", exc.one_line())
        self._queue.extend(self._newest())
        if self.armed is not None:  # nothing is in flight now: it binds this save alone
            self.mgr.commit_by(self.armed)
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

    def down_for_good(self) -> str | None:
        """Why training should stop now: saves have been failing, with no commit since the
        first failure, for longer than the save retry window (``BURST_CHECKPOINT_RETRY_S``):
        the store is down, and work trained from here on could not be kept. None otherwise
        (the count starts at the first failure the writer reports)."""
        status = self.mgr.status()
        if status.last_error is None:
            self._failing_since = None
            return None
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since, self._first_failure = now, status.last_error
            log.warning(
                "a checkpoint save failed (%s): training stops unless one commits within %gs",
                status.last_error,
                self.mgr.retry_s,
            )
            return None
        if now - self._failing_since <= self.mgr.retry_s:
            return None
        return (
            f"the checkpoint store failed every save for {now - self._failing_since:.1f}s, "
            f"longer than the retry window ({self.mgr.retry_s:g}s, BURST_CHECKPOINT_RETRY_S); "
            f"first: {self._first_failure}"
        )

    def last_commit(self) -> str:
        """The newest checkpoint this attempt saw commit, in words (no store access)."""
        last = self.mgr.status().last_committed
        return "none this attempt" if last is None else f"step {last.step} ({last.tier})"

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
        """Wait for the save in flight to commit; CheckpointError if it fails or times out
        (``timeout`` is capped by the bound)."""
        left = self.seconds_left()
        if left is not None:  # (a moment even past it: the commit may be done already)
            left = max(MIN_WAIT_S, left)
            timeout = left if timeout is None else min(timeout, left)
        self.mgr.wait(timeout)

    def latest(self, tier: str | None = None) -> CheckpointRef | None:
        return self.mgr.latest(tier)

    def durable(self, tier: str | None = None) -> CheckpointRef | None:
        """The newest checkpoint the store itself holds (``latest`` also counts the memory
        tiers' copies)."""
        return latest_checkpoint(self.mgr.store, tier)

    def refs(self) -> list[CheckpointRef]:
        return self.mgr.checkpoints()

    def committed(self) -> int:
        return len(self.refs())

    def restore_full(self) -> tuple[int, dict[str, Any]] | None:
        """The newest full checkpoint that restores (older ones if it is corrupt)."""
        if self.latest("full") is None:
            return None
        restored = self.mgr.restore(tier="full", fallback=True)
        self.restored_from = restored.source
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
    import torch

    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(state_nbytes(v) for v in state)
    nbytes = getattr(state, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
