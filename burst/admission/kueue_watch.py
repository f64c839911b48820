"""The Kueue eviction watcher: on a cluster where provision admitted the run through its Kueue
Workload (burst/admission/kueue_workload.py), the train step polls that Workload and, when
Kueue evicts it (a higher-priority run takes the quota) or it disappears, posts a preemption
notice: the loop saves (emergency save) and exits 76 (``QuotaTaken``: not retried in place);
the requeue gives the rental up and waits in the queue again (docs/queue.md).

It starts only on a cluster (burst.admission.kueue_reader.on_cluster) and stops quietly when
the run has no Workload at its first look (Kueue not installed, or a run admitted otherwise).
An API server that does not answer is logged once and polled again: it never stops training.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from burst.errors import InfraError
from burst.preempt.metadata import MetadataWatcher
from burst.preempt.notice import Notice, NoticeBoard
from burst.recovery import QUOTA_NOTICE

log = logging.getLogger(__name__)

SOURCE = QUOTA_NOTICE  # ("kueue-evicted": burst.recovery maps it to the source QUOTA)
#: What a Kueue eviction leaves the pods: Kueue gives no deadline for a standalone Workload;
#: the rental stays until teardown, so the save has the pod's SIGTERM grace at least.
NOTICE_S = 60.0


class KueueEvictionWatcher(MetadataWatcher):
    """Poll the run's Workload (``workloads``: a :class:`~burst.admission.kueue_workload.
    Workloads`) until it is evicted."""

    source = SOURCE

    def __init__(
        self, board: NoticeBoard, workloads: Any, name: str, poll_s: float | None = None
    ) -> None:
        from burst.settings import current

        super().__init__(board, base_url="kueue", poll_s=poll_s or current().kueue_poll_s)
        self.workloads = workloads
        self.workload = name
        self.seen = False  # the Workload was there once (a missing one is then a notice)
        self.absent = False  # not there at the first look: nothing to watch
        self._warned = False

    def check(self) -> list[Notice]:
        from burst.admission.kueue_reader import KueueAbsent
        from burst.admission.kueue_workload import eviction

        try:
            wl = self.workloads.get(self.workload)
        except KueueAbsent:  # Kueue is not installed: no Workload to watch
            wl = None
        except InfraError as exc:
            if not self._warned:
                log.warning("cannot read Kueue Workload %s (%s); polling on", self.workload, exc)
                self._warned = True
            return []
        self._warned = False
        if wl is None and not self.seen:
            self.absent = True
            self.stop()
            return []
        self.seen = True
        why = eviction(wl)
        if why is None:
            return []
        now = time.time()
        return [Notice(SOURCE, now, now + NOTICE_S, detail=why)]

    def run(self) -> None:
        super().run()
        if self.absent:
            log.info("no Kueue Workload %s: no eviction watcher", self.workload)


def kueue_watcher(board: NoticeBoard) -> MetadataWatcher | None:
    """The eviction watcher of this run's Workload, started (None: not on a cluster)."""
    from burst.admission.kueue_reader import InCluster, KueueReader, on_cluster
    from burst.admission.kueue_workload import Workloads, workload_name
    from burst.settings import current

    run_id = current().run_id
    if not on_cluster() or not run_id:
        return None
    try:
        workloads = Workloads(KueueReader(InCluster.from_pod()))
    except InfraError as exc:  # no credentials: nothing to watch with, training goes on
        log.warning("no Kueue eviction watcher: %s", exc.one_line())
        return None
    watcher = KueueEvictionWatcher(board, workloads, workload_name(run_id))
    watcher.start()
    return watcher
