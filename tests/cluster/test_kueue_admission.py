"""Kueue admits each run's quota under its team's queue and flavor, for every GPU type and
provider in the catalog, and the scheduler binds the train pod to a node of the flavor that was
rented (quota first, then rent: burst/admission/kueue_workload.py, issue 47).

On the engines tier (the real Kueue v0.17.0 with its webhooks, the real scheduler), with the
Kueue objects deploy/kueue applies: for every ResourceFlavor there, a run of its provider,
region, GPU type and capacity. Its standalone Workload is the one provision creates before any
Terraform apply (``workload_body`` for the run's candidate, created with the token of the
account the provision pod runs as, ``burst-run``); Kueue must admit it in the team's
ClusterQueue under exactly that flavor, the flavor provision's own model
(burst.admission.coverage) names. The run's node is shaped as the node group its provider's
Terraform makes (labels and taints read from the .tf files by
tests/deploy/test_kueue_providers.py, not from burst's Python) and its train pod as
burst-train's (no Kueue label: its quota is the Workload's; the selector and tolerations the
provider's stack outputs, the compiled template's resources and the GPUs of its podSpecPatch,
the restricted security context); the scheduler must bind the pod to that node. Every run has
a run id of its own, so that no run's pod can land on another's node.

A run no flavor covers: provision's Kueue gate (``kueue_gate``, against the real API server)
refuses it before anything is made or rented, and the gate is right to: the Workload it would
have made is never admitted, and Kueue says why on it.

All the runs are placed at once (one batch of nodes, pods and Workloads)."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.admission.coverage import RunPlacement, coverage
from burst.admission.kueue_objects import LABEL_PROVIDER, NAMESPACE
from burst.admission.kueue_reader import (
    FlavorRefused,
    InCluster,
    KueueReader,
    kueue_gate,
)
from burst.admission.kueue_workload import POD_SET, Workloads, workload_body, workload_name
from burst.documents.plan import Candidate
from burst.errors import EXIT_REFUSED
from burst.pipelines.common import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL, kueue_labels
from burst.pipelines.train_pod import GPUS, gpu_patch
from burst.providers import PROVIDER_STACKS
from burst.spec import BurstJob, load_spec
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.nodeagent import NodeShape
from devtools.cluster.tier import GPU_NODE_CAPACITY, REPO, Tier
from tests.deploy.test_kueue_providers import (
    CAPACITIES,
    GPUS_PER_NODE,
    RUN,
    NodeGroup,
    Rented,
    _compiled,
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
#: Every node and pod this module makes carries it, so that it can clean up after itself.
MARK = ("burst.dev/tier-test", "kueue-admission")
WAIT_S = 300.0
#: How long a Workload Kueue has said it cannot admit is watched more (not merely late).
STILL_S = 10.0


# --------------------------------------------------------------------------- the shapes
def for_run(r: Rented, run_id: str) -> Rented:
    """What the stack makes for ``run_id`` (the Terraform readers' runs are all RUN)."""

    def sub(d: dict[str, str]) -> dict[str, str]:
        return {k: run_id if v == RUN else v for k, v in d.items()}

    return Rented(
        groups=[NodeGroup(sub(g.labels), [sub(t) for t in g.taints]) for g in r.groups],
        selector=sub(r.selector),
        tolerations=[sub(t) for t in r.tolerations],
    )


def train_pod(name: str, run: Rented) -> dict[str, Any]:
    """burst-train's train pod for a run, as Argo makes it: no Kueue label (the run's quota is
    its Workload's), its container (command aside: the stand-in kubelet runs it on this
    machine) with the podSpecPatch's GPUs and the stack's selector and tolerations, the
    workflow's pod security context."""
    wf = _compiled("burst-train")
    (tpl,) = [t for t in wf["spec"]["templates"] if t["name"] == "train"]
    (patch,) = [
        s for n, _, s in gpu_pods(run.selector, run.tolerations) if n == "burst-train/train"
    ]
    assert kueue_labels() == {}, "the train pods carry Kueue labels again"
    tpl_labels = (tpl.get("metadata") or {}).get("labels") or {}
    assert KUEUE_QUEUE_LABEL not in tpl_labels and KUEUE_PRIORITY_LABEL not in tpl_labels, (
        f"the compiled train template queues its pod in Kueue: {tpl_labels}"
    )
    assert gpu_patch() in tpl["podSpecPatch"], "the template's GPUs are no longer gpu_patch()"
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
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": {MARK[0]: MARK[1]}},
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
    """One run: where it rents, its candidate, the nodes made for it, its train pods, the
    flavor Kueue must admit its Workload under (None: none may)."""

    what: str  # provider/region/gpu/capacity, for the messages
    run_id: str
    job: BurstJob
    candidate: Candidate
    flavor: str | None
    nodes: list[NodeShape] = field(default_factory=list)
    pods: list[dict[str, Any]] = field(default_factory=list)

    @property
    def workload(self) -> str:
        return workload_name(self.run_id)

    def body(self) -> dict[str, Any]:
        return workload_body(self.job, self.run_id, self.candidate, NAMESPACE)


def flavors(cp: ControlPlane) -> dict[str, dict[str, Any]]:
    """deploy/kueue's ResourceFlavors as the API server holds them (not another test's)."""
    shipped = [
        d["metadata"]["name"]
        for d in yaml.safe_load_all((REPO / "deploy" / "kueue" / "flavors.yaml").read_text())
        if d
    ]
    items = cp.get_json("resourceflavors.kueue.x-k8s.io")["items"]
    applied = {f["metadata"]["name"]: f for f in items}
    missing = [n for n in shipped if n not in applied]
    assert not missing, f"deploy/kueue's flavors the tier did not apply: {missing}"
    return {n: applied[n] for n in shipped}


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
def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    for c in ((obj or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return dict(c)
    return {}


def admission(w: dict[str, Any] | None) -> tuple[str, str] | None:
    """(ClusterQueue, the flavor of nvidia.com/gpu) Kueue admitted the Workload under."""
    adm = ((w or {}).get("status") or {}).get("admission")
    if not adm:
        return None
    (podset,) = adm["podSetAssignments"]
    assert podset["name"] == POD_SET
    return adm["clusterQueue"], podset.get("flavors", {}).get(GPU, "")


def pod_account(cp: ControlPlane, tmp: Path) -> tuple[dict[str, str], Path]:
    """What the kubelet mounts into the provision pod (account burst-run): its token, the CA,
    the namespace; and the environment a step sees on the cluster."""
    sa = tmp / "burst-run"
    sa.mkdir()
    (sa / "token").write_text(cp.create_token(NAMESPACE, "burst-run", duration="10m"))
    (sa / "namespace").write_text(NAMESPACE)
    (sa / "ca.crt").write_bytes((cp.pki / "ca.crt").read_bytes())
    env = {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(cp.api_port),
        "ARGO_NODE_ID": "kq-admission",
    }
    return env, sa


@dataclass
class Seen:
    """The batch's Workloads (by name) and pods (by name) as last polled."""

    workloads: dict[str, dict[str, Any]]
    pods: dict[str, dict[str, Any]]

    def explain(self, case: Case) -> str:
        w = self.workloads.get(case.workload)
        pods = []
        for p in case.pods:
            seen = self.pods.get(p["metadata"]["name"]) or {}
            sched = condition(seen, "PodScheduled")
            pods.append(
                f"pod {p['metadata']['name']} phase={(seen.get('status') or {}).get('phase')} "
                f"node={(seen.get('spec') or {}).get('nodeName')} "
                f"scheduled={sched.get('reason')}: {sched.get('message', '')}"
            )
        conditions = [
            (c["type"], c["status"], c.get("message", ""))
            for c in ((w or {}).get("status") or {}).get("conditions") or []
        ]
        return (
            f"{case.what} (run {case.run_id}, flavor {case.flavor}, nodes "
            f"{[n.name for n in case.nodes]}): {'; '.join(pods)}; workload {case.workload} "
            f"admission={admission(w)} conditions={conditions}"
        )


def look(cp: ControlPlane) -> Seen:
    wls = cp.get_json("workloads.kueue.x-k8s.io", "-n", NAMESPACE)["items"]
    pods = cp.get_json("pods", "-n", NAMESPACE, "-l", f"{MARK[0]}={MARK[1]}")["items"]
    return Seen(
        {w["metadata"]["name"]: w for w in wls},
        {p["metadata"]["name"]: p for p in pods},
    )


def settled(case: Case, seen: Seen) -> bool:
    """Kueue has decided on the case's Workload (admitted it, or said why it cannot), and its
    pods are bound."""
    w = seen.workloads.get(case.workload)
    if case.flavor is None:
        q = condition(w, "QuotaReserved")
        return q.get("status") == "False" and bool(q.get("message"))
    return admission(w) is not None and all(
        ((seen.pods.get(p["metadata"]["name"]) or {}).get("spec") or {}).get("nodeName")
        for p in case.pods
    )


@contextlib.contextmanager
def placed(tier: Tier, workloads: Workloads, cases: Sequence[Case]) -> Iterator[None]:
    """The cases' Workloads created (as provision creates them), their nodes registered and
    their pods created; on the way out, all gone (the Workloads as teardown deletes them; pods
    before nodes: a pod on a deleted node would wait for the pod garbage collector)."""
    cp = tier.cp
    nodes = [n for c in cases for n in c.nodes]
    pods = [p for c in cases for p in c.pods]
    sel = f"{MARK[0]}={MARK[1]}"
    try:
        for c in cases:
            assert workloads.create(c.body()) is not None, f"{c.workload} exists already"
        for n in nodes:
            tier.agent.add_node(n)
        cp.wait_for(
            lambda: (
                {n.name for n in nodes}
                <= {
                    n["metadata"]["name"]
                    for n in cp.get_json("nodes", "-l", sel)["items"]
                    if condition(n, "Ready").get("status") == "True"
                }
            ),
            "the runs' nodes Ready",
            120,
        )
        cp.kubectl("create", "-f", "-", stdin="\n---\n".join(yaml.safe_dump(p) for p in pods))
        yield
    finally:
        for c in cases:
            with contextlib.suppress(Exception):
                workloads.delete(c.workload)
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


# --------------------------------------------------------------------------- the runs
@pytest.fixture(scope="module")
def job() -> BurstJob:
    spec = load_spec(REPO / "examples" / "quickstart.yaml")
    assert spec.compute.gpus_per_node == GPUS_PER_NODE
    return spec.model_copy(
        update={
            "team": TEAM,
            "priority": PRIORITY,
            "compute": spec.compute.model_copy(update={"gpu_count": GPUS_PER_NODE}),
        }
    )


def every_flavor(cp: ControlPlane, job: BurstJob) -> list[Case]:
    """One run for each ResourceFlavor of the bundle (its provider, region, GPU type and
    capacity), on one node of its node group."""
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
        run_id = f"kq-{name}"
        mine = for_run(run, run_id)
        (group_of_run,) = for_run(Rented([g], {}, []), run_id).groups
        cases.append(
            Case(
                f"{provider}/{region}/{gpu}/{capacity}",
                run_id,
                job,
                Candidate.model_validate(
                    {"region": region, "provider": provider, "capacity": capacity, "gpu_type": gpu}
                ),
                name,
                [node_shape(run_id, group_of_run)],
                [train_pod(run_id, mine)],
            )
        )
    return cases


def spot_with_floor(cp: ControlPlane, job: BurstJob) -> list[Case]:
    """AWS's spot-with-floor runs of two nodes: one in the spot group, one in the on-demand
    floor. The stack's selector names no capacity, so neither does the Workload's."""
    fl = flavors(cp)
    two = job.model_copy(
        update={"compute": job.compute.model_copy(update={"gpu_count": 2 * GPUS_PER_NODE})}
    )
    cases = []
    for region, gpu in offers("aws"):
        spot = f"{gpu}-{region}-spot"
        if spot not in fl:
            continue
        run_id = f"kq-floor-{gpu}-{region}"
        run = for_run(rented("aws", gpu, region, "spot_with_floor"), run_id)
        assert "burst/capacity" not in run.selector
        by_cap = {g.labels["burst/capacity"]: g for g in run.groups}
        assert set(by_cap) == {"spot", "on_demand"}, run.groups
        cases.append(
            Case(
                f"aws/{region}/{gpu}/spot_with_floor",
                run_id,
                two,
                Candidate(
                    region=region,
                    provider="aws",
                    capacity="spot_with_floor",
                    gpu_type=gpu,
                    nodes=2,
                    floor_nodes=1,
                ),
                spot,
                [
                    node_shape(f"{run_id}-spot", by_cap["spot"]),
                    node_shape(f"{run_id}-floor", by_cap["on_demand"]),
                ],
                [train_pod(f"{run_id}-0", run), train_pod(f"{run_id}-1", run)],
            )
        )
    assert cases, "no AWS spot flavor in the bundle"
    return cases


def uncovered(cp: ControlPlane, job: BurstJob) -> Case:
    """A run on a GPU type and region no flavor covers (a provider the site's bundle is not
    for): nothing rented for it, so no node and no pod."""
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
    return Case(
        f"{provider}/{region}/{gpu}/spot",
        f"kq-uncovered-{provider}-{gpu}",
        job,
        Candidate(region=region, provider=provider, capacity="spot", gpu_type=gpu),
        None,
    )


@dataclass
class Batch:
    every: list[Case]
    floors: list[Case]
    nowhere: Case
    seen: Seen
    gate: list[Candidate]
    refusal: FlavorRefused
    model: dict[str, str | None]  # what burst.admission.coverage names, by Workload


@pytest.fixture(scope="module")
def batch(tier: Tier, job: BurstJob, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Batch]:
    """Every run placed at once; polled until Kueue has decided on every Workload and every
    admitted run's pods are bound (or the time is up), then STILL_S more for the run Kueue
    cannot admit."""
    cp = tier.cp
    env, sa = pod_account(cp, tmp_path_factory.mktemp("kq-admission"))
    every, floors, nowhere = every_flavor(cp, job), spot_with_floor(cp, job), uncovered(cp, job)
    cases = [*every, *floors, nowhere]
    # provision's Kueue gate, as the provision pod runs it (on the cluster, its account's
    # token), before anything is made: the covered candidates kept, the uncovered refused
    with pytest.MonkeyPatch.context() as mp:
        for k, v in env.items():
            mp.setenv(k, v)
        mp.delenv("BURST_POD_DIR", raising=False)
        from_pod = InCluster.from_pod
        mp.setattr(InCluster, "from_pod", staticmethod(lambda env=None: from_pod(env, sa)))
        gate = kueue_gate(job, [nowhere.candidate, *(c.candidate for c in every)])
        with pytest.raises(FlavorRefused) as refused:
            kueue_gate(job, [nowhere.candidate])
        api = InCluster.from_pod()
    reader = KueueReader(api)
    queue = reader.team_queue(TEAM)
    model = {
        c.workload: coverage(
            RunPlacement.of(c.candidate, c.job), queue.cluster_queue, queue.flavors
        ).flavor
        for c in cases
    }
    with placed(tier, Workloads(reader), cases):
        deadline = time.monotonic() + WAIT_S
        while True:
            cp.check_alive()
            seen = look(cp)
            if all(settled(c, seen) for c in cases) or time.monotonic() > deadline:
                break
            time.sleep(2.0)
        time.sleep(STILL_S)  # a while more: the one Kueue cannot admit is not merely late
        seen = look(cp)
        yield Batch(every, floors, nowhere, seen, gate, refused.value, model)


# --------------------------------------------------------------------------- the tests
def check(batch: Batch, cases: Sequence[Case]) -> None:
    problems = []
    for c in cases:
        w = batch.seen.workloads.get(c.workload)
        got = admission(w)
        bound = sorted(
            ((batch.seen.pods.get(p["metadata"]["name"]) or {}).get("spec") or {}).get("nodeName")
            or ""
            for p in c.pods
        )
        want = sorted(n.name for n in c.nodes)
        if got != (TEAM, c.flavor) or bound != want or batch.model[c.workload] != c.flavor:
            problems.append(
                f"expected ClusterQueue {TEAM} flavor {c.flavor} nodes {want}, got admission "
                f"{got} nodes {bound}, burst's model names {batch.model[c.workload]}\n    "
                + batch.seen.explain(c)
            )
    assert not problems, "\n".join(problems)


def test_every_flavor_s_run_is_admitted_in_its_team_s_queue_and_bound_to_its_node(
    batch: Batch,
) -> None:
    """One run for each ResourceFlavor of the bundle (its provider, region, GPU type and
    capacity): provision's gate keeps its candidate, its Workload is admitted in ClusterQueue
    ml-research under that flavor (the one burst's coverage model names), and its train pod
    is bound to the node its run rented, not another flavor's."""
    assert batch.gate == [c.candidate for c in batch.every], batch.gate
    check(batch, batch.every)


def test_a_spot_run_with_an_on_demand_floor_on_aws_is_admitted_under_spot_and_uses_its_floor(
    batch: Batch,
) -> None:
    """AWS's spot-with-floor run rents two node groups (spot and the on-demand floor) and its
    selector names no capacity: Kueue tries the spot flavor first and admits the run's two
    nodes' GPUs there; its train pods (no Kueue label, so no flavor's labels added to them)
    land on both of its nodes, the spot one and the floor's."""
    check(batch, batch.floors)
    for c in batch.floors:
        (pod_set,) = batch.seen.workloads[c.workload]["spec"]["podSets"]
        assert pod_set["count"] == 2, batch.seen.explain(c)


def test_a_run_no_flavor_covers_is_refused_before_anything_is_made_and_kueue_agrees(
    batch: Batch,
) -> None:
    """A run on a GPU type and region no flavor covers (a provider the site's bundle is not
    for): provision's gate refuses it in one line (exit 3) before any Workload or rental, or
    drops it among covered candidates; and the gate is right: the Workload it would have made
    is never admitted, and Kueue says why on it."""
    c = batch.nowhere
    assert batch.refusal.exit_code == EXIT_REFUSED
    line = batch.refusal.one_line()
    assert f"ClusterQueue {TEAM}" in line and c.candidate.region in line, line
    assert c.candidate not in batch.gate
    assert batch.model[c.workload] is None
    w = batch.seen.workloads.get(c.workload)
    msg = batch.seen.explain(c)
    assert w is not None, f"no Workload: {msg}"
    assert admission(w) is None, f"admitted under a flavor of other nodes: {msg}"
    assert condition(w, "Admitted").get("status") != "True", msg
    q = condition(w, "QuotaReserved")
    assert q.get("status") == "False" and "couldn't assign flavors" in q.get("message", ""), msg
    # it waits in the team's queue (pending, not lost)
    assert w["spec"]["queueName"] == f"burst-{TEAM}", msg
