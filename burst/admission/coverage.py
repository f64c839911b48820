"""Which Kueue flavor covers a run's placement, before anything is rented.

A run's train pod is admitted by Kueue under the first flavor of its team's ClusterQueue (in
order) that the pod's ``nodeSelector`` agrees with, whose taints it tolerates and whose quota
can hold it (burst/admission/kueue_objects.py cites Kueue's source). A placement no flavor
covers is never admitted: its nodes bill until the run's deadline. :func:`coverage` answers,
from the placement and the Kueue objects as the API server returns them (dicts), which flavor
covers it or, if none, one line naming the run's GPU type, region and capacity, the
ClusterQueue and its flavors. Pure: no I/O (the objects come from
:mod:`burst.admission.kueue_reader` on a cluster, from ``kueue_objects()`` in tests).

The pod's selector is the one the provider's Terraform hands it (modelled by
:data:`burst.admission.kueue_objects.NODE_PROFILES`, checked against the .tf files by
tests/deploy/test_kueue_providers.py): the labels its nodes carry, less ``burst/capacity`` for
an AWS spot run with an on-demand floor (its pods may land on either group). ``burst/run-id``
is left out: no flavor names it, so Kueue does not match on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from burst.admission.kueue_objects import GPU, LABEL_CAPACITY, profile_for
from burst.documents.plan import Candidate
from burst.plan.placement import default_capacity
from burst.spec import BurstJob, gpus_per_pod

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class RunPlacement:
    """Where a run will rent, as Kueue sees its train pod."""

    provider: str
    region: str
    gpu_type: str
    capacity: str  # spot, on_demand, spot_with_floor
    pod_gpus: int | None = None  # what one train pod asks for (None: not known)

    @classmethod
    def of(cls, candidate: Candidate, job: BurstJob) -> RunPlacement:
        """A plan candidate's placement (the spec's GPU type and capacity where it names none)."""
        return cls(
            provider=candidate.provider,
            region=candidate.region,
            gpu_type=candidate.gpu_type or job.compute.gpu_type,
            capacity=candidate.capacity or default_capacity(job.compute.capacity),
            pod_gpus=gpus_per_pod(job, candidate.to_json()),
        )

    def words(self) -> str:
        return f"{self.gpu_type} in {self.provider}/{self.region} ({self.capacity})"

    def selector(self) -> dict[str, str] | None:
        """The train pod's nodeSelector on the keys a flavor may name (None: no Terraform
        stack rents this provider's nodes)."""
        profile = profile_for(self.provider)
        if profile is None:
            return None
        node_capacities = profile.flavor_capacities(self.capacity)
        labels = profile.node_labels(self.gpu_type, self.region, node_capacities[0])
        if len(node_capacities) > 1:  # nodes of several capacity groups: no capacity selected
            labels.pop(LABEL_CAPACITY, None)
        return labels

    def tolerations(self) -> list[dict[str, str]]:
        """The tolerations the stack hands the pod (a run's own taint left out: no flavor
        taints nodes with it)."""
        profile = profile_for(self.provider)
        if profile is None:
            return []
        out: list[dict[str, str]] = []
        for cap in profile.flavor_capacities(self.capacity):
            out += [t for t in profile.tolerations(cap) if t not in out]
        return out


@dataclass(frozen=True)
class Coverage:
    """The flavor that covers a placement, or why none does (``refusal``: one line)."""

    flavor: str | None
    refusal: str | None = None

    @property
    def covered(self) -> bool:
        return self.flavor is not None


def _name(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name", ""))


def _tolerated(taint: Obj, tolerations: Iterable[Obj]) -> bool:
    """Kubernetes' ToleratesTaint: key (empty with Exists: every key), value unless Exists,
    effect (empty: every effect)."""
    for t in tolerations:
        if t.get("effect") and t.get("effect") != taint.get("effect"):
            continue
        if t.get("key") and t.get("key") != taint.get("key"):
            continue
        if not t.get("key") and t.get("operator") != "Exists":
            continue
        if t.get("operator") == "Exists" or t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _gpus(quantity: Any) -> int | None:
    text = str(quantity).strip()
    return int(text) if text.isdigit() else None


def _reachable(resources: Sequence[Obj], borrows: bool) -> int | None:
    """The GPUs of one flavor the team may hold at once: nominal + borrowingLimit (no limit in
    a cohort: not known here, None)."""
    for r in resources:
        if r.get("name") != GPU:
            continue
        nominal = _gpus(r.get("nominalQuota", 0))
        if nominal is None:
            return None
        if "borrowingLimit" in r:
            limit = _gpus(r["borrowingLimit"])
            return None if limit is None else nominal + (limit if borrows else 0)
        return nominal if not borrows else None
    return 0


def _gpu_group(cluster_queue: Obj) -> Obj | None:
    for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []:
        if GPU in (group.get("coveredResources") or []):
            return group
    return None


def coverage(placement: RunPlacement, cluster_queue: Obj, flavors: Iterable[Obj]) -> Coverage:
    """The first flavor of ``cluster_queue`` Kueue would admit ``placement``'s train pod under,
    or a refusal naming the placement, the ClusterQueue and its flavors."""
    queue = _name(cluster_queue)
    group = _gpu_group(cluster_queue)
    entries = list((group or {}).get("flavors") or [])
    names = [str(e.get("name", "")) for e in entries]

    def refuse(why: str) -> Coverage:
        listed = ", ".join(names) if names else "none"
        return Coverage(
            None,
            f"no Kueue flavor covers {placement.words()}: {why} (ClusterQueue {queue}, flavors: "
            f"{listed}); Kueue would never admit the run and its rented nodes would bill until "
            "its deadline",
        )

    if group is None:
        return refuse(f"ClusterQueue {queue} has no resource group covering {GPU}")
    objects = {_name(f): f for f in flavors}
    missing = [n for n in names if n not in objects]
    if missing:  # Kueue keeps such a ClusterQueue inactive: it admits nothing
        return refuse(
            f"the ClusterQueue names ResourceFlavors that do not exist: {', '.join(missing)}"
        )
    selector = placement.selector()
    if selector is None:
        return refuse(f"no Terraform stack rents {placement.provider}'s nodes")
    labels = {n: dict((objects[n].get("spec") or {}).get("nodeLabels") or {}) for n in names}
    keys = {k for fl in labels.values() for k in fl}  # the group's LabelKeys
    borrows = bool((cluster_queue.get("spec") or {}).get("cohortName"))
    tolerations = placement.tolerations()
    short: list[str] = []
    for entry, name in zip(entries, names, strict=True):
        spec = objects[name].get("spec") or {}
        if not all(labels[name].get(k) == v for k, v in selector.items() if k in keys):
            continue
        taints = spec.get("nodeTaints") or []
        if not all(_tolerated(t, [*tolerations, *(spec.get("tolerations") or [])]) for t in taints):
            continue
        need = placement.pod_gpus
        reach = _reachable(entry.get("resources") or [], borrows)
        if need is not None and reach is not None and reach < need:
            short.append(f"{name} ({reach} GPUs at most, its train pod asks {need})")
            continue
        return Coverage(name)
    if short:
        return refuse(f"the team's quota cannot hold its train pod in {', '.join(short)}")
    return refuse("no flavor's nodeLabels match the nodes it would rent")
