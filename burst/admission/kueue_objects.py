"""Kueue's objects for burst, generated from the catalog and the teams' GPU quota.

``deploy/kueue`` is their committed rendering (``burst kueue --out deploy/kueue``, run by
``make goldens``; tests/deploy/test_kueue_objects.py fails when the two drift). Call
:func:`kueue_objects` for the list of objects (what a test against a real Kueue applies).

* A **ResourceFlavor** per GPU type x region x capacity type the catalog can rent on the
  providers the site enables (:func:`site_providers`; default :func:`default_providers`):
  every offer (provider, region, GPU type) of such a provider, in a region of the catalog, not
  known to be unavailable, times the values of ``burst/capacity`` that provider's nodes
  carry. Its ``nodeLabels`` are exactly labels those nodes carry and its ``tolerations``
  exactly the stack's tolerations of the taints every such node carries
  (:data:`NODE_PROFILES`, checked against the Terraform by tests/deploy/test_kueue_providers.py).
  Named ``<gpu>-<region>-<capacity>`` (capacity ``spot``, ``ondemand`` or ``spotwithfloor``),
  labelled ``burst/provider``.
* A **WorkloadPriorityClass** per priority band of the spec (``burst-<priority>``).
* The **Cohort** ``burst``, a **ClusterQueue** per team of ``deploy/gpu-quota.yaml`` and a
  **LocalQueue** per team in the namespace burst runs in, named after the team.

What Kueue does with a flavor (kubernetes-sigs/kueue v0.17.0, docs/reference/walk-kueue.md):
it admits a pod under the first flavor of its ClusterQueue (in order) whose ``nodeLabels``
agree with the pod's ``nodeSelector`` on every key that *any* flavor of the resource group
names (flavorassigner.go ``flavorSelector`` with the group's ``LabelKeys``), then copies that
flavor's ``nodeLabels`` into the pod's ``nodeSelector`` and appends its ``tolerations``
(podset.go ``FromAssignment``/``Merge``). A label a flavor names that the nodes lack makes the
admitted pod unschedulable; so does a selector value no flavor names (never admitted).

Every flavor is in every team's ClusterQueue, and Kueue v0.17.0 (the version the engines tier
runs) writes one entry per flavor of a LocalQueue's ClusterQueue into the LocalQueue's status,
which its CRD caps at 16: :func:`kueue_objects` refuses more unless the site's Kueue has the
fix (``local_queue_status_64``; docs/reference/walk-kueue.md S8).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import yaml

from burst import checkout
from burst.errors import BadInputError
from burst.inputs import load_yaml_file, short
from burst.plan.catalog import Catalog, load_catalog
from burst.providers import PROVIDER_STACKS, store_refusal
from burst.spec import Priority

log = logging.getLogger(__name__)

API: Final = "kueue.x-k8s.io/v1beta2"
#: The namespace deploy/ installs into and `burst submit` submits to (ARGO_NAMESPACE=burst).
NAMESPACE: Final = "burst"
COHORT: Final = "burst"
GPU: Final = "nvidia.com/gpu"
#: Every resource the train pod (and Argo's init and wait containers beside it) requests.
COVERED: Final = ("cpu", "memory", GPU)
#: cpu and memory quota per GPU of nominal quota (a p5.48xlarge has 192 vCPUs, 2 TiB).
CPU_PER_GPU: Final = 12
MEMORY_GI_PER_GPU: Final = 160
#: The WorkloadPriorityClass of each priority band (label kueue.x-k8s.io/priority-class:
#: burst-<priority>); a borrowing workload may preempt other teams' up to ``normal``.
PRIORITY_VALUES: Final[Mapping[Priority, int]] = {
    Priority.low: 100,
    Priority.normal: 1000,
    Priority.high: 10000,
    Priority.critical: 100000,
}
BORROW_PREEMPT_UP_TO: Final = PRIORITY_VALUES[Priority.normal]
DEFAULT_QUOTA: Final = checkout.ROOT / "deploy" / "gpu-quota.yaml"

#: Kueue's limits (apis/kueue/v1beta2, v0.17.0): flavors of one resource group and entries of
#: a ClusterQueue's status (one per flavor); a flavor's nodeLabels and tolerations.
MAX_FLAVORS: Final = 64
MAX_NODE_LABELS: Final = 8
MAX_TOLERATIONS: Final = 8
#: A LocalQueue's status lists every flavor of its ClusterQueue (pkg/cache/scheduler/cache.go
#: ``LocalQueueUsage``/``filterLocalQueueUsage``, whatever is in use); v0.17.0's CRD allows 16
#: entries in ``flavorsReservation`` and ``flavorsUsage`` (kubernetes-sigs/kueue#12082 raised
#: it to 64 after v0.17.0). With more, the API server refuses every status update of the
#: LocalQueue: no Active condition, no counts (admission goes on: walk-kueue S8).
LOCAL_QUEUE_STATUS_FLAVORS_V0_17: Final = 16
#: The label naming a flavor's provider (metadata only: Kueue does not read it).
LABEL_PROVIDER: Final = "burst/provider"

LABEL_ACCELERATOR: Final = "accelerator"
LABEL_CAPACITY: Final = "burst/capacity"
LABEL_REGION: Final = "topology.kubernetes.io/region"
LABEL_COMPUTE_TYPE: Final = "eks.amazonaws.com/compute-type"
LABEL_RUN: Final = "burst/run-id"

#: A plan candidate's capacity types, in the order a ClusterQueue tries its flavors.
CAPACITY_ORDER: Final = ("spot", "spot_with_floor", "on_demand")

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"^{_DNS_LABEL}(\.{_DNS_LABEL})*$")
_LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")


@dataclass(frozen=True)
class NodeTaint:
    """A taint the nodes carry, and how the stack's ``tolerations`` output tolerates it.
    ``value`` None: each run's own value (the hybrid stacks' ``burst/run-id`` taint)."""

    key: str
    value: str | None
    effect: str = "NoSchedule"
    operator: str = "Equal"

    def toleration(self) -> dict[str, str]:
        if self.operator == "Exists":
            return {"key": self.key, "operator": "Exists", "effect": self.effect}
        return {
            "key": self.key,
            "operator": "Equal",
            "value": self.value or "",
            "effect": self.effect,
        }


@dataclass(frozen=True)
class NodeProfile:
    """The labels and taints of the GPU nodes one kind of Terraform stack rents.

    ``capacities``: the values of ``burst/capacity`` its nodes carry, one flavor each;
    ``fixed_labels``: labels every node carries whatever the run; ``region_label``: the label
    that carries the region (None: the nodes carry none); ``taints``: per capacity value, the
    taints of those nodes."""

    source: str
    capacities: tuple[str, ...]
    fixed_labels: Mapping[str, str]
    region_label: str | None
    taints: Mapping[str, tuple[NodeTaint, ...]]

    def node_labels(self, gpu_type: str, region: str, capacity: str) -> dict[str, str]:
        """The labels a flavor names: those every node of this kind carries (not the run id)."""
        labels = {LABEL_ACCELERATOR: gpu_type, LABEL_CAPACITY: capacity, **self.fixed_labels}
        if self.region_label is not None:
            labels[self.region_label] = region
        return dict(sorted(labels.items()))

    def tolerations(self, capacity: str) -> list[dict[str, str]]:
        """The flavor's tolerations: the stack's own tolerations of the taints every node of
        this capacity carries. A run's own taint is left to the pod (provision hands it its
        exact toleration): Kueue adds a flavor's tolerations to every pod it admits under it,
        so an ``Exists`` for ``burst/run-id`` would open every run's nodes to every pod."""
        return [t.toleration() for t in self.taints[capacity] if t.value is not None]

    def flavor_capacities(self, candidate_capacity: str) -> tuple[str, ...]:
        """The ``burst/capacity`` values of the flavors a pod of a candidate of this capacity
        may be admitted under (its nodes' values; an AWS spot run with an on-demand floor
        names no capacity in its selector, so both groups' flavors)."""
        if candidate_capacity in self.capacities:
            return (candidate_capacity,)
        if candidate_capacity == "spot_with_floor":
            return ("spot", "on_demand")
        raise BadInputError(f"unknown capacity type {short(candidate_capacity)}")


GPU_TAINT_EXISTS: Final = NodeTaint("nvidia.com/gpu", "present", operator="Exists")
GPU_TAINT: Final = NodeTaint("nvidia.com/gpu", "present")
SPOT_TAINT: Final = NodeTaint("spot", "true")
RUN_TAINT: Final = NodeTaint(LABEL_RUN, None)

#: EKS managed node groups (terraform/modules/aws-gpu-nodegroup, stack burst-run): labels
#: ``accelerator``, ``burst/run-id``, ``burst/capacity`` = lower(capacity_type) (the main
#: group spot or on_demand, an on-demand floor on_demand); the cloud sets
#: ``topology.kubernetes.io/region``. Taints: nvidia.com/gpu=present, spot=true on SPOT groups.
AWS_NODES: Final = NodeProfile(
    source="terraform/modules/aws-gpu-nodegroup (stack burst-run)",
    capacities=("spot", "on_demand"),
    fixed_labels={},
    region_label=LABEL_REGION,
    taints={"spot": (GPU_TAINT_EXISTS, SPOT_TAINT), "on_demand": (GPU_TAINT_EXISTS,)},
)
#: Rented VMs that join the home cluster as EKS hybrid nodes (terraform/modules/aws-hybrid-join,
#: stacks gcp-run, azure-run, nebius-run): labels ``accelerator``, ``burst/capacity`` = the
#: candidate's capacity on every node of the run (spot, on_demand or spot_with_floor),
#: ``topology.kubernetes.io/region`` = the run's region (the stack's ``node_labels``: no cloud
#: provider labels a hybrid node, its kubelet labels itself), ``burst/run-id``, and
#: ``eks.amazonaws.com/compute-type: hybrid`` (EKS). Taints: nvidia.com/gpu=present and
#: burst/run-id=<run>.
HYBRID_NODES: Final = NodeProfile(
    source="terraform/modules/aws-hybrid-join (stacks gcp-run, azure-run, nebius-run)",
    capacities=("spot", "spot_with_floor", "on_demand"),
    fixed_labels={LABEL_COMPUTE_TYPE: "hybrid"},
    region_label=LABEL_REGION,
    taints={c: (GPU_TAINT, RUN_TAINT) for c in ("spot", "spot_with_floor", "on_demand")},
)
#: Stack kind (``burst.providers.PROVIDER_STACKS`` values) -> the nodes it rents.
NODE_PROFILES: Final[Mapping[str, NodeProfile]] = {
    "aws": AWS_NODES,
    "gcp": HYBRID_NODES,
    "azure": HYBRID_NODES,
    "nebius": HYBRID_NODES,
}


def profile_for(provider: str) -> NodeProfile | None:
    """The nodes burst rents on ``provider`` (None: no stack provisions it)."""
    kind = PROVIDER_STACKS.get(provider)
    if kind is None:
        return None
    profile = NODE_PROFILES.get(kind)
    if profile is None:
        raise BadInputError(
            f"provider {provider}: stack {kind} has no node profile in "
            "burst/admission/kueue_objects.py NODE_PROFILES: its Kueue flavors cannot be made"
        )
    return profile


def capacity_slug(capacity: str) -> str:
    return capacity.replace("_", "")


def flavor_name(gpu_type: str, region: str, capacity: str) -> str:
    return f"{gpu_type}-{region}-{capacity_slug(capacity)}"


@dataclass(frozen=True)
class Flavor:
    """One ResourceFlavor: where it comes from and what it says."""

    name: str
    provider: str
    region: str
    gpu_type: str
    capacity: str
    gpus_per_node: int
    node_labels: dict[str, str]
    tolerations: list[dict[str, str]] = field(default_factory=list)

    def manifest(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"nodeLabels": dict(self.node_labels)}
        if self.tolerations:
            spec["tolerations"] = [dict(t) for t in self.tolerations]
        return {
            "apiVersion": API,
            "kind": "ResourceFlavor",
            "metadata": {"name": self.name, "labels": {LABEL_PROVIDER: self.provider}},
            "spec": spec,
        }


def _check_name(what: str, value: str, where: str) -> None:
    if not (_SUBDOMAIN.match(value) and _LABEL_VALUE.match(value) and len(value) <= 63):
        raise BadInputError(
            f"catalog offer {where}: {what} {short(value)} cannot name a Kueue flavor or label "
            "a node (at most 63 lowercase letters, digits, '-' and '.')"
        )


def _only(providers: Iterable[str] | None) -> set[str]:
    if providers is None:
        return set(PROVIDER_STACKS)
    chosen = set(providers)
    unknown = sorted(chosen - set(PROVIDER_STACKS))
    if unknown:
        raise BadInputError(
            f"provider {short(unknown[0])}: burst rents no nodes there (providers with a "
            f"Terraform stack: {', '.join(PROVIDER_STACKS)})"
        )
    return chosen


def default_providers() -> tuple[str, ...]:
    """The providers a site enables unless it names its own: every provider whose runs burst
    provisions on a cloud stack (a Terraform stack whose checkpoint store burst can open; the
    planner refuses the others' candidates outside the local stack, so no pod of theirs is
    ever queued)."""
    return tuple(p for p, kind in PROVIDER_STACKS.items() if store_refusal(kind) is None)


def site_providers(providers: Iterable[str] | None = None) -> tuple[str, ...]:
    """The providers whose flavors the site's queues hold (``burst kueue --provider``), in
    ``burst.providers`` order: ``providers`` (checked), or :func:`default_providers`."""
    if providers is None:
        return default_providers()
    chosen = _only(providers)
    return tuple(p for p in PROVIDER_STACKS if p in chosen)


def rentable_flavors(cat: Catalog, providers: Iterable[str] | None = None) -> list[Flavor]:
    """Every flavor the catalog can rent (on ``providers`` only, when given), in the order a
    ClusterQueue tries them: spot, then spot with an on-demand floor, then on demand; by
    provider (burst.providers order), region and GPU type within each."""
    order = list(PROVIDER_STACKS)
    chosen = _only(providers)
    out: dict[str, Flavor] = {}
    skipped: set[str] = set()
    for off in cat.offers.values():
        where = f"{off.provider}/{off.region}/{off.gpu_type}"
        if off.provider in PROVIDER_STACKS and off.provider not in chosen:
            continue
        profile = profile_for(off.provider)
        if profile is None:
            skipped.add(off.provider)
            continue
        if (off.provider, off.region) not in cat.regions:
            log.info("no Kueue flavor for %s: region not in the catalog's regions", where)
            continue
        if str(off.facts["availability"].value) == "unavailable":
            log.info("no Kueue flavor for %s: unavailable (catalog)", where)
            continue
        _check_name("GPU type", off.gpu_type, where)
        _check_name("region", off.region, where)
        for capacity in profile.capacities:
            flavor = Flavor(
                name=flavor_name(off.gpu_type, off.region, capacity),
                provider=off.provider,
                region=off.region,
                gpu_type=off.gpu_type,
                capacity=capacity,
                gpus_per_node=off.gpus_per_instance,
                node_labels=profile.node_labels(off.gpu_type, off.region, capacity),
                tolerations=profile.tolerations(capacity),
            )
            other = out.get(flavor.name)
            if other is not None:
                raise BadInputError(
                    f"catalog offers {other.provider}/{other.region}/{other.gpu_type} and "
                    f"{where} would both be Kueue flavor {flavor.name}: flavors are named "
                    "<gpu>-<region>-<capacity>, so one region id cannot serve two providers"
                )
            out[flavor.name] = flavor
    for provider in sorted(skipped):
        log.info("no Kueue flavors for provider %s: no Terraform stack rents its nodes", provider)
    flavors = sorted(
        out.values(),
        key=lambda f: (
            CAPACITY_ORDER.index(f.capacity),
            order.index(f.provider),
            f.region,
            f.gpu_type,
        ),
    )
    if len(flavors) > MAX_FLAVORS:
        raise BadInputError(
            f"the catalog rents {len(flavors)} GPU type x region x capacity combinations; a "
            f"Kueue ClusterQueue holds at most {MAX_FLAVORS} flavors in a resource group"
        )
    for f in flavors:
        if len(f.node_labels) > MAX_NODE_LABELS or len(f.tolerations) > MAX_TOLERATIONS:
            raise BadInputError(
                f"flavor {f.name}: more nodeLabels or tolerations than Kueue allows"
            )
    return flavors


#: A team's LocalQueue is ``burst-<team>``, never the team's name alone: Kueue (v0.17.0,
#: feature gate LocalQueueDefaulting, on by default: pkg/controller/jobframework/webhook
#: ApplyDefaultLocalQueue) puts every pod of a managed namespace that names no queue into the
#: LocalQueue called ``default`` when one exists. The shipped team ``default`` then pulled
#: every step pod (preflight, provision, teardown) into Kueue, which admitted it under a GPU
#: flavor and pinned it to GPU nodes with their tolerations: no step but train ever scheduled
#: on the cluster's own nodes, and teardown could not run (found by the engines tier).
LOCAL_QUEUE_PREFIX = "burst-"
TEAM_MAX = 63 - len(LOCAL_QUEUE_PREFIX)


def local_queue_name(team: str) -> str:
    """The LocalQueue a team's runs queue in (the run's Workload's ``spec.queueName``)."""
    return LOCAL_QUEUE_PREFIX + team


def team_quotas(path: str | Path = DEFAULT_QUOTA) -> dict[str, int]:
    """The teams of the GPU quota ConfigMap (deploy/gpu-quota.yaml): team -> how many of its
    runs may run at once."""
    doc = load_yaml_file(path, what="GPU quota", shipped=checkout.is_shipped(path))
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, dict) or not data:
        raise BadInputError(
            "a GPU quota must be a ConfigMap with data: {team: runs}", where=str(path)
        )
    out: dict[str, int] = {}
    for team, raw in data.items():
        name = str(team)
        if not (_SUBDOMAIN.match(name) and len(name) <= TEAM_MAX):
            raise BadInputError(
                f"team {short(name)} cannot name a Kueue ClusterQueue and LocalQueue "
                f"(at most {TEAM_MAX} "
                "lowercase letters, digits, '-' and '.')",
                where=str(path),
            )
        text = str(raw)
        if not text.isdigit():
            raise BadInputError(
                f"team {name}: runs at once must be a whole number >= 0 (got {short(raw)})",
                where=str(path),
            )
        out[name] = int(text)
    return out


def _quota(name: str, amount: int | str, borrowing: int | None = None) -> dict[str, Any]:
    q: dict[str, Any] = {"name": name, "nominalQuota": amount}
    if borrowing is not None:
        q["borrowingLimit"] = borrowing
    return q


def flavor_quota(flavor: Flavor, runs: int) -> dict[str, Any]:
    """A team's quota of one flavor: ``runs`` nodes of spot (or spot with a floor), and as much
    again borrowed; on demand, one node fewer as its own (the floor) and ``runs`` nodes at
    most. cpu and memory follow the nominal GPUs and may be borrowed without limit."""
    per_run = flavor.gpus_per_node
    gpus = runs * per_run
    own = gpus if flavor.capacity != "on_demand" else max(runs - 1, 0) * per_run
    return {
        "name": flavor.name,
        "resources": [
            _quota("cpu", own * CPU_PER_GPU),
            _quota("memory", f"{own * MEMORY_GI_PER_GPU}Gi"),
            _quota(GPU, own, gpus),
        ],
    }


def cluster_queue(team: str, runs: int, flavors: Iterable[Flavor]) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ClusterQueue",
        "metadata": {"name": team},
        "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {},
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {
                "whenCanBorrow": "MayStopSearch",
                "whenCanPreempt": "TryNextFlavor",
            },
            "preemption": {
                "withinClusterQueue": "LowerPriority",
                "reclaimWithinCohort": "Any",
                "borrowWithinCohort": {
                    "policy": "LowerPriority",
                    "maxPriorityThreshold": BORROW_PREEMPT_UP_TO,
                },
            },
            "resourceGroups": [
                {
                    "coveredResources": list(COVERED),
                    "flavors": [flavor_quota(f, runs) for f in flavors],
                }
            ],
        },
    }


def check_local_queue_status(flavors: list[Flavor], providers: Iterable[str]) -> None:
    """Refuse ClusterQueues whose LocalQueues Kueue v0.17.0 cannot give a status (more than
    :data:`LOCAL_QUEUE_STATUS_FLAVORS_V0_17` flavors): one line naming the way out."""
    if len(flavors) <= LOCAL_QUEUE_STATUS_FLAVORS_V0_17:
        return
    raise BadInputError(
        f"{len(flavors)} Kueue flavors in every team's ClusterQueue (providers "
        f"{', '.join(providers)}): Kueue v0.17.0 and older refuse every status update of a "
        f"LocalQueue whose ClusterQueue has more than {LOCAL_QUEUE_STATUS_FLAVORS_V0_17} "
        "(kubernetes-sigs/kueue#12079): name fewer providers (burst kueue --provider), or pass "
        "--local-queue-status-64 if the site's Kueue has kubernetes-sigs/kueue#12082"
    )


def kueue_objects(
    catalog: Catalog | None = None,
    teams: Mapping[str, int] | None = None,
    providers: Iterable[str] | None = None,
    *,
    local_queue_status_64: bool = False,
) -> list[dict[str, Any]]:
    """Every Kueue object burst needs, in apply order: ResourceFlavors, WorkloadPriorityClasses,
    the Cohort, a ClusterQueue and a LocalQueue per team. Defaults: the shipped catalog only
    (not $BURST_CATALOG), deploy/gpu-quota.yaml, the providers of :func:`default_providers`.
    More than 16 flavors are refused unless ``local_queue_status_64`` (the site's Kueue lists
    up to 64 in a LocalQueue's status: kubernetes-sigs/kueue#12082)."""
    cat = catalog if catalog is not None else load_catalog(use_env=False)
    quotas = dict(teams) if teams is not None else team_quotas()
    chosen = site_providers(providers)
    flavors = rentable_flavors(cat, chosen)
    if not local_queue_status_64:
        check_local_queue_status(flavors, chosen)
    out: list[dict[str, Any]] = [f.manifest() for f in flavors]
    out += [
        {
            "apiVersion": API,
            "kind": "WorkloadPriorityClass",
            "metadata": {"name": f"burst-{p}"},
            "value": value,
        }
        for p, value in PRIORITY_VALUES.items()
    ]
    out.append({"apiVersion": API, "kind": "Cohort", "metadata": {"name": COHORT}, "spec": {}})
    out += [cluster_queue(team, runs, flavors) for team, runs in quotas.items()]
    out += [
        {
            "apiVersion": API,
            "kind": "LocalQueue",
            "metadata": {"name": local_queue_name(team), "namespace": NAMESPACE},
            "spec": {"clusterQueue": team},
        }
        for team in quotas
    ]
    log.debug("Kueue objects: %d flavors, %d teams", len(flavors), len(quotas))
    return out


# --------------------------------------------------------------------------- rendering

GENERATED = (
    "# Generated by `burst kueue --out deploy/kueue` (make goldens; burst/admission/\n"
    "# kueue_objects.py) from the catalog (burst/plan/catalog/default.yaml) and\n"
    "# deploy/gpu-quota.yaml: do not edit by hand (tests/deploy/test_kueue_objects.py fails\n"
    "# when they drift).\n"
)
HEADERS: Final[Mapping[str, str]] = {
    "ResourceFlavor": (
        "# ResourceFlavors: one per GPU type x region x capacity type the catalog can rent on\n"
        "# those providers, named <gpu>-<region>-<capacity> (label burst/provider). nodeLabels\n"
        "# are labels those nodes carry: EKS node groups (aws-gpu-nodegroup) accelerator,\n"
        "# burst/capacity and topology.kubernetes.io/region; hybrid nodes of the gcp, azure\n"
        "# and nebius stacks (aws-hybrid-join) the same (their stacks label the region) and\n"
        "# eks.amazonaws.com/compute-type: hybrid. tolerations: the stack's own for the taints\n"
        "# every such node carries (a run's own taint: the pod's). Kueue adds a flavor's\n"
        "# nodeLabels and tolerations to the pods it admits under it (docs/queue.md).\n"
    ),
    "WorkloadPriorityClass": (
        "# One WorkloadPriorityClass per priority band of the spec: the train pods carry\n"
        "# kueue.x-k8s.io/priority-class: burst-<priority>; a higher value may preempt a lower\n"
        "# one, and Kueue orders each queue by it.\n"
    ),
    "Cohort": (
        "# The cohort every team's ClusterQueue belongs to: unused quota of one team may be\n"
        "# borrowed by another (up to each flavor's borrowingLimit), reclaimed by preemption.\n"
    ),
    "ClusterQueue": (
        "# A ClusterQueue per team of deploy/gpu-quota.yaml, in the cohort `burst`, with every\n"
        "# flavor (at most 16 unless the site's Kueue has kubernetes-sigs/kueue#12082: v0.17.0\n"
        "# refuses every status update of a LocalQueue whose ClusterQueue has more). GPU quota\n"
        "# per flavor, tried in order: spot, spot with an on-demand floor, then on demand. A team\n"
        "# may run as many nodes of a flavor as its runs at once (gpu-quota.yaml) and borrow as\n"
        "# many again; its on-demand floor is one node fewer. Within a team a higher priority\n"
        "# preempts a lower one; a borrowing workload may preempt only up to normal priority in\n"
        "# other teams. Every resource the train pod requests is covered, with the same\n"
        "# resources in every flavor (Kueue's CEL rule on resourceGroups).\n"
    ),
    "LocalQueue": (
        "# A LocalQueue per team in burst's namespace, named after the team: the run's Workload,\n"
        "# which provision creates before renting, names it in spec.queueName (the spec's team,\n"
        "# the workflow parameter `team`; burst/admission/kueue_workload.py).\n"
    ),
}
FILES: Final[Mapping[str, str]] = {
    "ResourceFlavor": "flavors.yaml",
    "WorkloadPriorityClass": "priorities.yaml",
    "Cohort": "cohort.yaml",
    "ClusterQueue": "clusterqueues.yaml",
    "LocalQueue": "localqueues.yaml",
}
KUSTOMIZATION = (
    "# Kueue (API kueue.x-k8s.io/v1beta2) quotas and priorities for burst's train pods:\n"
    "# `kubectl apply -k deploy/kueue` after installing Kueue with its pod integration enabled\n"
    '# (docs/queue.md "Kueue"). Cluster-scoped ResourceFlavors, Cohort, ClusterQueues and\n'
    "# WorkloadPriorityClasses; LocalQueues in the namespace burst runs in. Validated offline\n"
    "# against Kueue's own CRD schemas (tests/deploy/test_kueue.py).\n"
)


class _Dumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)  # lists indented under their key


def _dump(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(
        yaml.dump(d, Dumper=_Dumper, sort_keys=False, width=100, default_flow_style=False)
        for d in docs
    )


def _scope(objects: list[dict[str, Any]]) -> str:
    """The header line naming the providers the flavors are for (their ``burst/provider``)."""
    named = {
        o["metadata"].get("labels", {}).get(LABEL_PROVIDER)
        for o in objects
        if o["kind"] == "ResourceFlavor"
    }
    providers = [p for p in PROVIDER_STACKS if p in named] or ["none"]
    return f"# Providers the site rents on (burst kueue --provider): {', '.join(providers)}.\n"


def render(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The files of deploy/kueue: file name -> text."""
    files: dict[str, str] = {}
    generated = GENERATED + _scope(objects)
    for kind, name in FILES.items():
        docs = [o for o in objects if o["kind"] == kind]
        files[name] = generated + HEADERS[kind] + _dump(docs)
    kustomization = {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "labels": [{"pairs": {"app.kubernetes.io/part-of": "burst"}, "includeSelectors": False}],
        "resources": list(FILES.values()),
    }
    files["kustomization.yaml"] = generated + KUSTOMIZATION + _dump([kustomization])
    return files


def write(out_dir: str | Path, files: Mapping[str, str]) -> list[Path]:
    from burst.outputs import write_output

    return [
        write_output(Path(out_dir) / name, text, option="--out DIR") for name, text in files.items()
    ]
