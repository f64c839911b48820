"""Kueue admits each run under its team's queue and flavor, for every GPU type and provider in
the catalog, and the scheduler binds the train pod to a node of the flavor that was rented.

On the engines tier (the real Kueue v0.17.0 with its webhooks, the real scheduler), with the
Kueue objects deploy/kueue applies: for every ResourceFlavor there, a node shaped as the node
group its provider's Terraform makes for a run in that region with that GPU type (labels and
taints read from the .tf files by tests/deploy/test_kueue_providers.py, not from burst's
Python) and a pod shaped as burst-train's train pod for that run (the team's Kueue labels, the
selector and tolerations the provider's stack outputs, the compiled template's resources and
the GPUs of its podSpecPatch, the restricted security context). Kueue must admit its Workload
in the team's ClusterQueue under that flavor, and the scheduler bind the pod to that node.
A run no flavor covers is never admitted: its pod stays gated while its nodes bill (until the
reaper), and Kueue says why on the Workload."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from burst.admission.kueue_objects import LABEL_PROVIDER, NAMESPACE
from burst.pipelines.common import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, kueue_labels
from burst.pipelines.train_pod import GPUS, gpu_patch
from burst.providers import PROVIDER_STACKS
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.nodeagent import NodeShape
from devtools.cluster.tier import GPU_NODE_CAPACITY, Tier
from tests.deploy.test_kueue_providers import (
    CAPACITIES,
    GPUS_PER_NODE,
    NodeGroup,
    Rented,
    _compiled,
    argo,
    gpu_pods,
    offers,
    rented,
)

pytestmark = pytest.mark.cluster

TEAM = "ml-research"
PRIORITY = "normal"
GPU = "nvidia.com/gpu"
#: What a GPU node of a run holds (the brief's 8 GPUs, 96 CPUs, 1280Gi; pods as a kubelet's).
CAPACITY = {**GPU_NODE_CAPACITY, GPU: str(GPUS_PER_NODE), "cpu": "96", "memory": "1280Gi"}
#: Every object this module makes carries it, so that it can clean up after itself.
MARK = ("burst.dev/tier-test", "kueue-admission")
GATE = "kueue.x-k8s.io/admission"
WAIT_S = 300.0


# --------------------------------------------------------------------------- the shapes
def train_pod(name: str, run: Rented, team: str = TEAM, priority: str = PRIORITY) -> dict[str, Any]:
    """burst-train's train pod for a run, as Argo makes it: the template's labels (Kueue's,
    the team and priority substituted), its container (command aside: the stand-in kubelet
    runs it on this machine) with the podSpecPatch's GPUs and the stack's selector and
    tolerations, the workflow's pod security context."""
    wf = _compiled("burst-train")
    (tpl,) = [t for t in wf["spec"]["templates"] if t["name"] == "train"]
    (patch,) = [
        s for n, _, s in gpu_pods(run.selector, run.tolerations) if n == "burst-train/train"
    ]
    labels = {
        k: argo(v, team).replace("{{workflow.parameters.priority}}", priority)
        for k, v in kueue_labels().items()
    }
    assert gpu_patch() in tpl["podSpecPatch"], "the template's GPUs are no longer gpu_patch()"
    tpl_labels = tpl["metadata"]["labels"]
    assert {k: tpl_labels[k] for k in labels} == kueue_labels(), "the template's Kueue labels"
    container = copy.deepcopy(tpl["container"])
    resources = copy.deepcopy(container.get("resources") or {})
    (main,) = patch["containers"]
    for kind, values in main["resources"].items():
        for res, v in values.items():
            resources.setdefault(kind, {})[res] = str(GPUS_PER_NODE) if v == GPUS else v
    assert resources["requests"][GPU] == resources["limits"][GPU] == str(GPUS_PER_NODE)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {**labels, MARK[0]: MARK[1]},
        },
        "spec": {
            "restartPolicy": "Never",
            "securityContext": copy.deepcopy(wf["spec"]["securityContext"]),
            "nodeSelector": patch["nodeSelector"],
            "tolerations": patch["tolerations"],
            "terminationGracePeriodSeconds": patch["terminationGracePeriodSeconds"],
            "containers": [
                {
                    "name": "main",
                    "image": "burst-trainer:tier",
                    "command": ["sleep", "1"],
                    "resources": resources,
                    "securityContext": container["securityContext"],
                }
            ],
        },
    }


def node_shape(name: str, group: NodeGroup) -> NodeShape:
    return NodeShape(
        name,
        labels={**group.labels, MARK[0]: MARK[1]},
        taints=[dict(t) for t in group.taints],
        capacity=CAPACITY,
    )


@dataclass
class Case:
    """One run: where it rents, the node made for it, its pod, the flavor Kueue must pick."""

    what: str  # provider/region/gpu/capacity, for the messages
    flavor: str | None  # None: no flavor covers the run
    node: NodeShape
    pod: dict[str, Any]

    @property
    def pod_name(self) -> str:
        return str(self.pod["metadata"]["name"])


def flavors(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    items = cp.get_json("resourceflavors.kueue.x-k8s.io")["items"]
    return {f["metadata"]["name"]: f for f in items}


def run_of(flavor: dict[str, Any]) -> tuple[str, str, str, str, Rented, NodeGroup]:
    """The run that rents this flavor's nodes, from its provider's Terraform: the capacity
    whose stack output selects the flavor's capacity, and the node group it makes there."""
    name = flavor["metadata"]["name"]
    labels = flavor["spec"]["nodeLabels"]
    provider = flavor["metadata"]["labels"][LABEL_PROVIDER]
    gpu, region = labels["accelerator"], labels["topology.kubernetes.io/region"]
    assert (region, gpu) in offers(provider), f"{name}: the catalog offers no {gpu} in {region}"
    for capacity in CAPACITIES:
        r = rented(provider, gpu, region, capacity)
        if r.selector.get("burst/capacity") != labels["burst/capacity"]:
            continue
        groups = [g for g in r.groups if all(g.labels.get(k) == v for k, v in labels.items())]
        assert len(groups) == 1, f"{name}: {provider}'s {capacity} run makes {r.groups}"
        return provider, gpu, region, capacity, r, groups[0]
    raise AssertionError(f"{name}: no {provider} run selects burst/capacity {labels}")


# --------------------------------------------------------------------------- the tier
def workloads(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    """Kueue's Workloads of the namespace, by the uid of the pod that owns each."""
    out = {}
    for w in cp.get_json("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]:
        for ref in w["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == "Pod":
                out[ref["uid"]] = w
    return out


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for c in (obj.get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def admission(w: dict[str, Any] | None) -> tuple[str, str] | None:
    """(ClusterQueue, the flavor of nvidia.com/gpu) Kueue admitted the Workload under."""
    adm = ((w or {}).get("status") or {}).get("admission")
    if not adm:
        return None
    (podset,) = adm["podSetAssignments"]
    return adm["clusterQueue"], podset.get("flavors", {}).get(GPU, "")


def explain(case: Case, pod: dict[str, Any] | None, w: dict[str, Any] | None) -> str:
    spec = (pod or {}).get("spec") or {}
    status = (pod or {}).get("status") or {}
    sched = condition(pod or {}, "PodScheduled")
    return (
        f"{case.what} (flavor {case.flavor}, node {case.node.name}): "
        f"pod {case.pod_name} phase={status.get('phase')} node={spec.get('nodeName')} "
        f"gates={[g['name'] for g in spec.get('schedulingGates') or []]} "
        f"scheduled={sched.get('reason')}: {sched.get('message', '')}; "
        f"workload {(w or {}).get('metadata', {}).get('name')} admission={admission(w)} "
        f"conditions={[(c['type'], c['status'], c.get('message', '')) for c in ((w or {}).get('status') or {}).get('conditions') or []]}"
    )


@contextlib.contextmanager
def placed(tier: Tier, cases: list[Case], more: Sequence[NodeShape] = ()) -> Iterator[None]:
    """The cases' nodes (and ``more``) registered and their pods created; on the way out,
    all gone (pods first: a pod on a deleted node would wait for the pod garbage collector)."""
    cp = tier.cp
    nodes = [c.node for c in cases] + list(more)
    try:
        for n in nodes:
            tier.agent.add_node(n)
        cp.wait_for(
            lambda: (
                {n.name for n in nodes}
                <= {
                    n["metadata"]["name"]
                    for n in cp.get_json("nodes", "-l", f"{MARK[0]}={MARK[1]}")["items"]
                    if condition(n, "Ready").get("status") == "True"
                }
            ),
            "the runs' nodes Ready",
            120,
        )
        cp.kubectl("create", "-f", "-", stdin="\n---\n".join(_yaml(c.pod) for c in cases))
        yield
    finally:
        sel = f"{MARK[0]}={MARK[1]}"
        cp.kubectl("delete", "pods", "-n", NAMESPACE, "-l", sel, "--wait=false", check=False)
        with contextlib.suppress(Exception):
            cp.wait_for(
                lambda: not cp.get_json("pods", "-n", NAMESPACE, "-l", sel)["items"],
                "the test's pods gone",
                120,
                every=1.0,
            )
        for n in nodes:
            tier.agent.nodes.pop(n.name, None)  # no more heartbeats for it
        cp.kubectl("delete", "nodes", "-l", sel, "--wait=false", check=False)


def _yaml(doc: dict[str, Any]) -> str:
    return yaml.safe_dump(doc)


def pods_by_name(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    items = cp.get_json("pods", "-n", NAMESPACE, "-l", f"{MARK[0]}={MARK[1]}")["items"]
    return {p["metadata"]["name"]: p for p in items}


def poll(
    tier: Tier, cases: list[Case], done: Any, timeout: float = WAIT_S
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any] | None]]:
    """The cases' pods and Workloads (by pod name), polled until ``done(case, pod, workload)``
    holds for every case or the time is up (then the last seen)."""
    cp = tier.cp
    deadline = time.monotonic() + timeout
    while True:
        cp.check_alive()
        pods = pods_by_name(cp)
        wls = workloads(cp)
        by_pod = {
            c.pod_name: wls.get(pods.get(c.pod_name, {}).get("metadata", {}).get("uid", ""))
            for c in cases
        }
        if all(done(c, pods.get(c.pod_name), by_pod[c.pod_name]) for c in cases):
            return pods, by_pod
        if time.monotonic() > deadline:
            return pods, by_pod
        time.sleep(2.0)


def admitted_and_bound(c: Case, pod: dict[str, Any] | None, w: dict[str, Any] | None) -> bool:
    return bool(pod and admission(w) and (pod.get("spec") or {}).get("nodeName"))


def check_admitted_and_bound(tier: Tier, cases: list[Case], more: Sequence[NodeShape] = ()) -> None:
    with placed(tier, cases, more):
        pods, wls = poll(tier, cases, admitted_and_bound)
        problems = []
        for c in cases:
            pod, w = pods.get(c.pod_name), wls[c.pod_name]
            got = admission(w)
            node = ((pod or {}).get("spec") or {}).get("nodeName")
            if got != (TEAM, c.flavor) or node != c.node.name:
                problems.append(
                    f"expected ClusterQueue {TEAM} flavor {c.flavor} node {c.node.name}, got "
                    f"admission {got} node {node}\n    " + explain(c, pod, w)
                )
        assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- the tests
def test_every_flavor_s_run_is_admitted_in_its_team_s_queue_and_bound_to_its_node(
    tier: Tier, cp: ControlPlane
) -> None:
    """One run for each ResourceFlavor of the bundle (its provider, region, GPU type and
    capacity), all at once: each pod is admitted in ClusterQueue ml-research under that
    flavor and bound to the node its run rented, not another flavor's."""
    fl = flavors(cp)
    assert fl, "the bundle applied no ResourceFlavor"
    # every offer of each provider the bundle is for has a flavor (the catalog's GPU types
    # and regions), so the runs below are every GPU type and region the site can rent
    scope = {f["metadata"]["labels"][LABEL_PROVIDER] for f in fl.values()}
    covered = {
        (f["metadata"]["labels"][LABEL_PROVIDER],
         f["spec"]["nodeLabels"]["topology.kubernetes.io/region"],
         f["spec"]["nodeLabels"]["accelerator"])
        for f in fl.values()
    }  # fmt: skip
    missing = [(p, r, g) for p in sorted(scope) for r, g in offers(p) if (p, r, g) not in covered]
    assert not missing, f"offers of the bundle's providers no flavor covers: {missing}"
    queue = cp.get_json("clusterqueues.kueue.x-k8s.io", TEAM)
    (group,) = queue["spec"]["resourceGroups"]
    quota = {f["name"]: f for f in group["flavors"]}
    cases = []
    for name, f in sorted(fl.items()):
        provider, gpu, region, capacity, run, g = run_of(f)
        gpus = {r["name"]: r for r in quota[name]["resources"]}[GPU]
        assert int(gpus["nominalQuota"]) + int(gpus.get("borrowingLimit", 0)) >= GPUS_PER_NODE, (
            f"{name}: ClusterQueue {TEAM} cannot reach {GPUS_PER_NODE} GPUs"
        )
        cases.append(
            Case(
                f"{provider}/{region}/{gpu}/{capacity}",
                name,
                node_shape(f"kq-{name}", g),
                train_pod(f"kq-{name}", run),
            )
        )
    check_admitted_and_bound(tier, cases)


def test_a_spot_run_with_an_on_demand_floor_on_aws_is_admitted_under_spot_and_lands_on_spot(
    tier: Tier, cp: ControlPlane
) -> None:
    """AWS's spot-with-floor run rents two node groups (spot and the on-demand floor) and its
    selector names no capacity: Kueue tries the spot flavor first, admits it there, and the
    pod lands on the spot node, not the floor's."""
    fl = flavors(cp)
    cases, floors = [], []
    for region, gpu in offers("aws"):
        spot = f"{gpu}-{region}-spot"
        if spot not in fl:
            continue
        run = rented("aws", gpu, region, "spot_with_floor")
        assert "burst/capacity" not in run.selector
        by_cap = {g.labels["burst/capacity"]: g for g in run.groups}
        assert set(by_cap) == {"spot", "on_demand"}, run.groups
        name = f"kq-floor-{gpu}-{region}"
        cases.append(
            Case(
                f"aws/{region}/{gpu}/spot_with_floor",
                spot,
                node_shape(name, by_cap["spot"]),
                train_pod(name, run),
            )
        )
        # the floor's node is there too: the pod must not land on it
        floors.append(node_shape(f"{name}-floor", by_cap["on_demand"]))
    assert cases, "no AWS spot flavor in the bundle"
    check_admitted_and_bound(tier, cases, floors)


def test_a_run_no_flavor_covers_is_never_admitted_and_kueue_says_so(
    tier: Tier, cp: ControlPlane
) -> None:
    """A run on a GPU type and region no flavor covers (a provider the site's bundle is not
    for): its node joins (and bills), its train pod stays gated, its Workload is not admitted
    and Kueue reports why on it: the class 'never admitted, nodes bill until the reaper'."""
    fl = flavors(cp)
    covered = {
        (
            f["spec"]["nodeLabels"]["topology.kubernetes.io/region"],
            f["spec"]["nodeLabels"]["accelerator"],
        )
        for f in fl.values()
    }
    scope = {f["metadata"]["labels"][LABEL_PROVIDER] for f in fl.values()}
    candidates = [
        (p, r, g)
        for p in sorted(set(PROVIDER_STACKS) - scope)
        for r, g in offers(p)
        if (r, g) not in covered
    ]
    assert candidates, "every offer of the catalog has a flavor: no uncovered run to try"
    provider, region, gpu = candidates[0]
    run = rented(provider, gpu, region, "spot")
    name = f"kq-uncovered-{provider}-{gpu}"
    case = Case(
        f"{provider}/{region}/{gpu}/spot",
        None,
        node_shape(name, run.groups[0]),
        train_pod(name, run),
    )

    def reported(c: Case, pod: dict[str, Any] | None, w: dict[str, Any] | None) -> bool:
        q = condition(w or {}, "QuotaReserved")
        return bool(q and q["status"] == "False" and q.get("message"))

    with placed(tier, [case]):
        pods, wls = poll(tier, [case], reported, timeout=180)
        # a while more: it is not merely late
        time.sleep(10)
        pods, wls = poll(tier, [case], reported, timeout=0)
        pod, w = pods.get(case.pod_name), wls[case.pod_name]
        msg = explain(case, pod, w)
        assert pod is not None and w is not None, f"no pod or Workload: {msg}"
        assert admission(w) is None, f"admitted under a flavor of other nodes: {msg}"
        assert condition(w, "Admitted").get("status") != "True", msg
        q = condition(w, "QuotaReserved")
        assert q.get("status") == "False" and "couldn't assign flavors" in q.get("message", ""), msg
        assert not pod["spec"].get("nodeName"), msg
        assert GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or []], msg
        assert (pod.get("status") or {}).get("phase") == "Pending", msg
        # the queue is the team's (it is queued, pending, not lost)
        assert w["spec"]["queueName"] == pod["metadata"]["labels"][KUEUE_QUEUE_LABEL], msg
        assert pod["metadata"]["labels"][KUEUE_PRIORITY_LABEL] == f"burst-{PRIORITY}"
