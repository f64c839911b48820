"""Quota first, then rent: the run's standalone Kueue Workload (docs/queue.md).

On a cluster with Kueue, provision creates one Workload per run in the run's namespace
(:func:`workload_name`: ``burst-<run id>``) in its team's LocalQueue (``burst-<team>``), at the
run's WorkloadPriorityClass (``burst-<priority>``), with a podSet per capacity the run rents
(:mod:`burst.admission.podsets`), each shaped as the train pods those rented nodes will run:
``count`` = those nodes, each asking the GPUs of one train pod and the train pod's CPU/memory
floor, with the nodeSelector and tolerations of those nodes
(:class:`~burst.admission.coverage.RunPlacement`), so Kueue assigns each podSet the flavor of
its nodes. One podSet (``train``) for most runs; an AWS spot run with an on-demand floor has
two, ``train`` (its spot nodes, under the spot flavor) and ``floor`` (under the on-demand
flavor): Kueue gives each podSet its own flavor, so each flavor's quota counts what the team
rents of it. Provision waits for the Workload's ``Admitted`` condition (quota reserved, no
pending admission check) before any Terraform apply (:func:`wait_admitted`); the train pods
carry no Kueue labels (burst/pipelines/common.py), so they are not admitted twice, and Kueue
never rewrites their selector. Teardown deletes the Workload (:func:`release_quota`), which
releases the quota.

When Kueue evicts the Workload (a higher-priority run takes the quota), the train step's
watcher (burst/admission/kueue_watch.py) reads :func:`eviction` and posts a notice: emergency
save, exit 76 (``QuotaTaken``), teardown releases the rental and the requeue waits in the
queue again.

Kueue v0.17.0 serves ``kueue.x-k8s.io/v1beta2``: ``spec.priorityClassRef`` (group
kueue.x-k8s.io, kind WorkloadPriorityClass) and, required with it by the CRD's validation,
``spec.priority`` (the class's value, :data:`~burst.admission.kueue_objects.PRIORITY_VALUES`).
A Workload with no owner is Kueue's "manual" Workload: deleting it releases its finalizer
(pkg/controller/core/workload_controller.go).

Fail closed: an API server that cannot be read is InfraError (exit 4); a queue wait longer
than ``BURST_KUEUE_WAIT_S`` is :class:`QueueTimeout` (exit 75: requeue, not bad input).
"""

from __future__ import annotations

import logging
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from burst.admission.coverage import RunPlacement
from burst.admission.kueue_objects import GPU, PRIORITY_VALUES, local_queue_name
from burst.admission.kueue_reader import (
    ApiAnswer,
    InCluster,
    KueueAbsent,
    KueueReader,
    KueueView,
    on_cluster,
)
from burst.admission.podsets import TRAIN, PodSetShare, run_pod_sets
from burst.documents.plan import Candidate
from burst.errors import InfraError, Preempted
from burst.spec import BurstJob

log = logging.getLogger(__name__)

#: The name of the train pods' container in a podSet, and of the run's first podSet
#: (burst.admission.podsets: an AWS spot run's on-demand floor is podSet ``floor``).
POD_SET: Final = TRAIN
#: Kueue's visibility API (positions in a LocalQueue): optional, read best-effort.
VISIBILITY_API: Final = "visibility.kueue.x-k8s.io/v1beta2"
PART_OF: Final = {"app.kubernetes.io/part-of": "burst"}
#: The train pod's CPU/memory floor (burst/pipelines/train_pod.py train_resources).
TRAIN_FLOOR: Final = {"cpu": "4", "memory": "16Gi"}
DEFAULT_POLL_S: Final = 5.0
#: A Workload Kueue has not admitted this long after it was made is queued, whatever its
#: conditions say (Kueue admits one that fits within a scheduling cycle).
QUEUED_AFTER_S: Final = 30.0
#: how often a waiting run asks dispatch again (``BURST_KUEUE_REDISPATCH_S``)
DEFAULT_REDISPATCH_S: Final = 60.0


class QueueTimeout(Preempted):
    """The run waited in its team's queue longer than ``BURST_KUEUE_WAIT_S`` (exit 75:
    requeued, never bad input); nothing was rented."""


def workload_name(run_id: str) -> str:
    """The run's Workload (a DNS subdomain: run ids are workflow names)."""
    return f"burst-{run_id}"[:253].rstrip("-.")


def pod_set(share: PodSetShare, job: BurstJob) -> dict[str, Any]:
    """One podSet of the Workload: ``share.count`` train pods, each asking the GPUs of one
    train pod and its CPU/memory floor, with the nodeSelector and tolerations of the nodes
    ``share`` rents (so Kueue assigns their flavor)."""
    placement = share.placement
    selector = placement.selector()
    if selector is None:
        raise InfraError(
            f"no Terraform stack rents {placement.provider}'s nodes: no Workload can be built",
            where="provision",
        )
    requests = {GPU: str(placement.pod_gpus or job.compute.gpus_per_node), **TRAIN_FLOOR}
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "nodeSelector": selector,
        "containers": [{"name": POD_SET, "resources": {"requests": requests}}],
    }
    tolerations = placement.tolerations()
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {"name": share.name, "count": share.count, "template": {"spec": pod_spec}}


def workload_body(
    job: BurstJob, run_id: str, candidate: Candidate, namespace: str
) -> dict[str, Any]:
    """The Workload that reserves ``candidate``'s quota for ``run_id``: what its rented nodes
    give the train pods, GPUs of the candidate's type on each of its nodes, one podSet per
    capacity it rents (:func:`burst.admission.podsets.run_pod_sets`: an AWS spot run's
    on-demand floor is charged to the on-demand flavor, its other nodes to the spot one)."""
    priority = job.priority
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": workload_name(run_id),
            "namespace": namespace,
            "labels": {**PART_OF, "burst.dev/run-id": run_id[:63], "burst.dev/team": job.team},
        },
        "spec": {
            "queueName": local_queue_name(job.team),
            "priorityClassRef": {
                "group": "kueue.x-k8s.io",
                "kind": "WorkloadPriorityClass",
                "name": f"burst-{priority}",
            },
            "priority": PRIORITY_VALUES[priority],
            "podSets": [pod_set(share, job) for share in run_pod_sets(job, candidate)],
        },
    }


# --------------------------------------------------------------------------- states


def condition(workload: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for c in (workload.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == kind:
            return c
    return None


def _true(workload: Mapping[str, Any], kind: str) -> bool:
    c = condition(workload, kind)
    return c is not None and c.get("status") == "True"


def admitted(workload: Mapping[str, Any]) -> bool:
    """Quota reserved and every admission check passed (Kueue's ``Admitted`` condition), and
    not being evicted."""
    return _true(workload, "Admitted") and not _true(workload, "Evicted")


def eviction(workload: Mapping[str, Any] | None) -> str | None:
    """Why a Workload that was admitted no longer holds its quota (None: it still does)."""
    if workload is None:
        return "the run's Workload was deleted"
    if (workload.get("metadata") or {}).get("deletionTimestamp"):
        return "the run's Workload is being deleted"
    if (workload.get("spec") or {}).get("active") is False:
        return "the run's Workload was deactivated"
    for kind in ("Evicted", "Preempted"):
        c = condition(workload, kind)
        if c is not None and c.get("status") == "True":
            why = f"{c.get('reason')}: {c.get('message')}"
            return f"Kueue {kind.lower()} the run's Workload ({why})"
    c = condition(workload, "QuotaReserved")
    if c is not None and c.get("status") != "True":
        return f"the run's Workload lost its quota ({c.get('reason')}: {c.get('message')})"
    return None


def assigned_flavors(workload: Mapping[str, Any]) -> str | None:
    """The flavor Kueue assigned each podSet's GPUs (``train: <flavor>, floor: <flavor>``;
    one podSet: its flavor alone)."""
    admission = (workload.get("status") or {}).get("admission") or {}
    got = [
        (str(ps.get("name")), str((ps.get("flavors") or {}).get(GPU)))
        for ps in admission.get("podSetAssignments") or []
        if (ps.get("flavors") or {}).get(GPU)
    ]
    if len(got) <= 1:
        return got[0][1] if got else None
    return ", ".join(f"{name}: {flavor}" for name, flavor in got)


# --------------------------------------------------------------------------- API


@dataclass
class Workloads:
    """The run's Workload through the API server (create, get, delete; its queue position)."""

    reader: KueueReader

    @property
    def namespace(self) -> str:
        return self.reader.api.namespace

    def _path(self, name: str | None = None) -> str:
        ns = urllib.parse.quote(self.namespace, safe="")
        base = f"namespaces/{ns}/workloads"
        return base if name is None else f"{base}/{urllib.parse.quote(name, safe='')}"

    def get(self, name: str) -> dict[str, Any] | None:
        return self.reader.call("GET", self._path(name), name)

    def create(self, body: Mapping[str, Any]) -> dict[str, Any] | None:
        """The created Workload (None: one of that name exists already)."""
        try:
            return self.reader.call("POST", self._path(), body=body)
        except ApiAnswer as exc:
            if exc.code == 409:
                return None
            raise

    def delete(self, name: str) -> bool:
        """Delete ``name`` (False: there was none)."""
        return self.reader.call("DELETE", self._path(name), name) is not None

    def position(self, team: str, name: str) -> int | None:
        """The Workload's position in its LocalQueue (Kueue's visibility API; None when it is
        not served or does not list the Workload: a position is a courtesy, never a gate)."""
        ns = urllib.parse.quote(self.namespace, safe="")
        lq = urllib.parse.quote(local_queue_name(team), safe="")
        try:
            doc = self.reader.call(
                "GET",
                f"namespaces/{ns}/localqueues/{lq}/pendingworkloads",
                api=VISIBILITY_API,
            )
        except InfraError:
            return None
        for item in (doc or {}).get("items") or []:
            if (item.get("metadata") or {}).get("name") == name:
                pos = item.get("positionInLocalQueue")
                return int(pos) if isinstance(pos, int) else None
        return None


def stale(workload: Mapping[str, Any]) -> bool:
    """A Workload left from an earlier placement, which the run cannot wait on: evicted,
    finished or being deleted (an evicted standalone Workload keeps its quota reserved until
    it is deleted)."""
    held = _true(workload, "QuotaReserved") or _true(workload, "Evicted")
    return (
        _true(workload, "Finished")
        or (held and eviction(workload) is not None)
        or bool((workload.get("metadata") or {}).get("deletionTimestamp"))
    )


class _Moved(Exception):
    """Dispatch, asked again while the run waited, found room in another candidate's queue:
    ``order``, the candidates to wait in now."""

    def __init__(self, order: list[Candidate]) -> None:
        super().__init__("moved")
        self.order = order


def _delete_and_wait(
    workloads: Workloads, name: str, sleep: Callable[[float], None], gone_s: float
) -> None:
    workloads.delete(name)
    deadline = time.monotonic() + gone_s
    while workloads.get(name) is not None:
        if time.monotonic() > deadline:
            raise InfraError(
                f"Kueue Workload {name} was deleted but is still there after {gone_s:.0f} s",
                where="Kueue",
            )
        sleep(1.0)


def ensure_workload(
    workloads: Workloads,
    body: Mapping[str, Any],
    sleep: Callable[[float], None] = time.sleep,
    gone_s: float = 60.0,
) -> dict[str, Any]:
    """Create the run's Workload. One that exists already (a retried provision) is kept while
    it waits or holds its quota; one that was evicted, deactivated or finished is deleted and
    made again (a requeue waits in the queue again)."""
    name = str(body["metadata"]["name"])
    for _ in range(3):
        made = workloads.create(body)
        if made is not None:
            log.info("Kueue: created Workload %s in LocalQueue %s", name, body["spec"]["queueName"])
            return made
        old = workloads.get(name)
        if old is None:
            continue
        if not stale(old):
            log.info("Kueue: Workload %s exists already (a retried provision): waiting on it", name)
            return old
        log.info("Kueue: Workload %s is left from an earlier placement: making it again", name)
        _delete_and_wait(workloads, name, sleep, gone_s)
    raise InfraError(f"cannot create Kueue Workload {name}", where="Kueue")


def wait_admitted(
    workloads: Workloads,
    name: str,
    team: str,
    wait_s: float,
    poll_s: float = DEFAULT_POLL_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    on_queued: Callable[[], None] | None = None,
    reconsider: Callable[[], list[Candidate] | None] | None = None,
    reconsider_s: float = DEFAULT_REDISPATCH_S,
) -> dict[str, Any]:
    """Poll the Workload until Kueue admits it; renting nothing meanwhile. Logs "queued in
    burst-<team> (position N)" when the position changes. ``on_queued`` runs once, when Kueue
    has said the Workload does not fit now (``QuotaReserved`` False) or it is not admitted
    after :data:`QUEUED_AFTER_S`. Longer than ``wait_s``: the Workload is deleted (nothing
    holds a place nobody waits on) and QueueTimeout (exit 75). ``reconsider``, every
    ``reconsider_s`` of waiting: the candidates to wait in instead (None: stay); the wait
    ends with :class:`_Moved` (:func:`reserve_quota` moves the Workload)."""
    queue = local_queue_name(team)
    started = clock()
    looked = started
    said: tuple[int | None, str] | None = None
    while True:
        wl = workloads.get(name)
        if wl is None:
            raise InfraError(
                f"Kueue Workload {name} disappeared while the run waited in {queue}",
                where="Kueue",
            )
        if admitted(wl):
            log.info(
                "Kueue: admitted in %s under flavor %s after %.0f s",
                queue, assigned_flavors(wl), clock() - started,
            )  # fmt: skip
            return wl
        if _true(wl, "Finished") or (wl.get("spec") or {}).get("active") is False:
            c = condition(wl, "Finished") or {}
            raise InfraError(
                f"Kueue Workload {name} will never be admitted in {queue}: "
                f"{c.get('message') or 'it was deactivated'}",
                where="Kueue",
            )
        pending = condition(wl, "QuotaReserved") or {}
        if on_queued is not None and (
            pending.get("status") == "False" or clock() - started >= QUEUED_AFTER_S
        ):
            on_queued()
            on_queued = None
        position = workloads.position(team, name)
        now = (position, str(pending.get("message") or ""))
        if now != said:
            where = f" (position {position})" if position is not None else ""
            why = f": {now[1]}" if now[1] else ""
            log.info("queued in %s%s%s", queue, where, why)
            said = now
        if clock() - started >= wait_s:
            workloads.delete(name)
            raise QueueTimeout(
                f"the run waited {wait_s:.0f} s in Kueue queue {queue} without being admitted "
                "(BURST_KUEUE_WAIT_S); nothing was rented: requeue it",
                where="provision",
            )
        if reconsider is not None and clock() - looked >= reconsider_s:
            looked = clock()
            moved = reconsider()
            if moved:
                raise _Moved(moved)
        sleep(poll_s)


def covered_by(job: BurstJob, candidates: Sequence[Candidate], first: Candidate) -> list[Candidate]:
    """The candidates that rent what ``first``'s quota covers (its GPU type, provider,
    region and capacity, so the same flavor): what provision may fail over between while
    holding the quota Kueue gave ``first``."""
    want = RunPlacement.of(first, job)
    same = []
    for c in candidates:
        p = RunPlacement.of(c, job)
        if (p.provider, p.region, p.gpu_type, p.capacity) == (
            want.provider, want.region, want.gpu_type, want.capacity,
        ):  # fmt: skip
            same.append(c)
    return same


def reserve_quota(
    job: BurstJob,
    run_id: str,
    candidates: Sequence[Candidate],
    wait_s: float,
    kueue: KueueView,
    on_queued: Callable[[], None] | None = None,
    poll_s: float = DEFAULT_POLL_S,
    redispatch: Callable[[float], list[Candidate]] | None = None,
    redispatch_s: float = DEFAULT_REDISPATCH_S,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[Candidate]:
    """Provision's quota gate, after the flavor gate and before any apply: on a cluster with
    Kueue (``kueue``: provision's one read of it, ``burst.admission.kueue_reader.read_kueue``),
    create the run's Workload for the first candidate and wait until Kueue admits it; the
    candidates that rent under the same flavors (the admitted quota). ``on_queued`` runs once
    when the Workload is not admitted at its first look (provision releases an earlier
    placement's rental there: a queued run holds none). Under `burst run`, or on a cluster
    without Kueue (an empty view), the candidates as they are (the ledger admits alone).

    ``redispatch``: while the run waits, every ``redispatch_s`` dispatch is asked again with
    the seconds waited (``burst.admission.dispatch.dispatch_run``: the queues with room now,
    a pinned run's other regions once its wait outweighs the move's cost); when its first
    candidate rents under other flavors, the Workload is deleted and made again for it (the
    wait's limit counts from the first look, across moves)."""
    if not candidates or kueue.reader is None:
        return list(candidates)
    workloads = Workloads(kueue.reader)
    order = list(candidates)
    started = clock()
    released = False

    def queued() -> None:  # an earlier rental is released once, whichever queue waits
        nonlocal released
        if on_queued is not None and not released:
            released = True
            on_queued()

    def elsewhere() -> list[Candidate] | None:
        now = redispatch(clock() - started) if redispatch is not None else []
        if not now or covered_by(job, [now[0]], order[0]):
            return None
        return now

    while True:
        body = workload_body(job, run_id, order[0], kueue.reader.api.namespace)
        name = str(body["metadata"]["name"])
        try:
            if on_queued is not None and not released:
                left = workloads.get(name)
                if left is not None and stale(left):
                    # the evicted Workload's quota is the GPUs its rental holds: the rental
                    # goes first, then the Workload (a preemptor admitted on that quota must
                    # not rent while the victim's nodes stand)
                    queued()
            wl = ensure_workload(workloads, body, sleep=sleep)
        except KueueAbsent as exc:
            log.info("%s: Kueue is not installed; the ledger admits the run alone", exc.one_line())
            return list(candidates)
        if admitted(wl):
            break
        try:
            wait_admitted(
                workloads, name, job.team, max(0.0, wait_s - (clock() - started)),
                poll_s=poll_s, sleep=sleep, clock=clock,
                on_queued=queued if on_queued is not None else None,
                reconsider=elsewhere if redispatch is not None else None,
                reconsider_s=redispatch_s,
            )  # fmt: skip
            break
        except _Moved as moved:
            log.info(
                "Kueue: after %.0f s queued, dispatch moves the run from %s/%s to %s/%s, "
                "which has room now: its Workload is made again there",
                clock() - started, order[0].provider, order[0].region,
                moved.order[0].provider, moved.order[0].region,
            )  # fmt: skip
            _delete_and_wait(workloads, name, sleep, 60.0)
            order = moved.order
    return covered_by(job, order, order[0])


def release_quota(run_id: str, api: InCluster | None = None) -> bool:
    """Teardown's hook: delete the run's Workload, which releases its quota (False: there was
    none, or this is not a cluster with Kueue). Fails closed: an API server that cannot be
    read raises InfraError."""
    if not on_cluster():
        return False
    name = workload_name(run_id)
    try:
        gone = Workloads(KueueReader(api or InCluster.from_pod())).delete(name)
    except KueueAbsent:
        return False
    log.info("Kueue: Workload %s %s", name, "deleted" if gone else "was already gone")
    return gone
