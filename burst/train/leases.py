"""One trainer per run: the trainer lease in the run's store and the run's heartbeat.

The lease is taken before anything is read or written (refused, exit 3, while another live
trainer renews it); the heartbeat tells the reaper someone is driving the run. Every renewal
also keeps the attempt's open record current and turns a lost lease, or a driver that stopped
renewing its own heartbeat, into a stop notice (save and stop at the next step boundary).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from burst.lease import (
    TRAINER_KEY,
    Lease,
    Renewer,
    describe_holder,
    heartbeat_key,
    heartbeat_store,
    is_live,
    read_lease,
)
from burst.preempt.notice import Notice, NoticeBoard
from burst.settings import current
from burst.storage.base import ObjectStore

log = logging.getLogger(__name__)


def stop_notice(board: NoticeBoard, source: str, detail: str) -> None:
    """Post a stop notice (no deadline) unless one is on the board already."""
    if board.stop_notice() is None:
        log.error("%s: %s", source, detail)
        board.post(Notice(source, time.time(), None, detail=detail))


class TrainerLeases:
    """The leases of one attempt (rank 0 of a multi-process trainer holds them for all)."""

    def __init__(self, run_id: str, run_dir: Path, leader: bool, role: str = "trainer") -> None:
        """``role``: the heartbeat's name (a regional worker's: ``worker-<region>``)."""
        self.run_id = run_id
        self.role = role
        self.run_dir = run_dir
        self.leader = leader
        self.lease: Lease | None = None
        self.heartbeat: Lease | None = None
        self.renewer: Renewer | None = None

    def take(self, store: ObjectStore) -> None:
        if not self.leader:
            return
        holder = describe_holder(f"run {self.run_id} trainer")
        self.lease = Lease.for_env(store, TRAINER_KEY, holder, f"run {self.run_id}'s trainer lease")
        self.lease.take()
        self.heartbeat = Lease.for_env(
            heartbeat_store(self.run_id, self.run_dir),
            heartbeat_key(self.role),
            holder,
            f"run {self.run_id}'s trainer heartbeat",
        )
        self.heartbeat.beat()

    def keep(self, board: NoticeBoard, each_renewal: Callable[[], None]) -> None:
        """Renew in the background; ``each_renewal`` runs after every renewal."""
        if self.lease is None or self.heartbeat is None:
            return

        def tick() -> None:
            self._check(board)
            each_renewal()

        self.renewer = Renewer(
            [self.lease], self.lease.ttl / 4, tick=tick, beats=[self.heartbeat]
        ).start()

    def _check(self, board: NoticeBoard) -> None:
        """Stop if the lease was lost or the driver is gone."""
        if self.renewer is not None and self.renewer.lost.is_set():
            stop_notice(board, "lease-lost", "another trainer took this run's lease")
        if current().driver_heartbeat and self.heartbeat is not None:
            # lapsed, not merely "its process is gone": the bound is the same on every host
            driver = read_lease(self.heartbeat.store, heartbeat_key("driver"))
            if not is_live(driver):
                stop_notice(
                    board,
                    "driver-lost",
                    f"the run's driver ({(driver or {}).get('holder', 'unknown')}) stopped "
                    "renewing its heartbeat: saving and stopping (resume with `burst resume`)",
                )

    def release(self) -> None:
        if self.renewer is not None:
            self.renewer.stop()
        for lease in (self.lease, self.heartbeat):
            if lease is not None and lease.token:
                lease.release()
