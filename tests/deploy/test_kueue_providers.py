"""Scheduling across providers through Kueue: for every provider burst can rent on, the pods
the compiled templates create (train, the gang's pods, the regional workers), with the node
selector and tolerations that provider's Terraform hands them, are admitted by Kueue under a
flavor of deploy/kueue, and after Kueue adds that flavor's nodeLabels and tolerations they
still land on the nodes that provider's Terraform makes (labels and taints read from the
.tf files, not from burst's Python).

Kueue is modelled from its source (kubernetes-sigs/kueue v0.17.0):
pkg/scheduler/flavorassigner/flavorassigner.go ``findFlavorForPodSets`` (flavors in the
ClusterQueue's order, ``checkFlavorForPodSets``: the flavor's nodeTaints tolerated by the
pod's and the flavor's tolerations, then ``flavorSelector`` restricted to the resource
group's ``LabelKeys``, the union of every flavor's nodeLabels keys:
pkg/cache/scheduler/clusterqueue.go ``updateLabelKeys``, matched against a node whose labels
are the flavor's nodeLabels), and pkg/podset/podset.go ``FromAssignment`` + ``Merge`` (the
flavor's nodeLabels copied into the pod's nodeSelector, an error on a conflicting value; its
tolerations appended unless an equal one is there). Quota: a flavor fits when the team can
reach the pod's GPUs in it (nominal + borrowingLimit, at most the cohort's nominal). The queue:
the pod's ``kueue.x-k8s.io/queue-name`` label (with the workflow's team substituted by Argo)
names a LocalQueue of the pod's namespace, burst's; that LocalQueue names the ClusterQueue the
pod is admitted in, whose flavors and quota are the ones above (no such LocalQueue: never
admitted). A pod that names no queue is put in the LocalQueue called ``default``, if there is
one (LocalQueueDefaulting, on by default in v0.17.0)."""

from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.admission.kueue_objects import (
    LABEL_PROVIDER,
    NAMESPACE,
    NODE_PROFILES,
    kueue_objects,
    team_quotas,
)
from burst.pipelines.common import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from burst.pipelines.gang import UNQUOTED
from burst.plan.catalog import load_catalog
from burst.providers import PROVIDER_STACKS, STACK_DIRS

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
STACKS = REPO / "terraform" / "stacks"
KUEUE = REPO / "deploy" / "kueue"
BEFORE = Path(__file__).resolve().parent / "before"
COMPILED = REPO / "burst" / "pipelines" / "compiled"
RUN = "wf-1"
EKS_EFFECTS = {"NO_SCHEDULE": "NoSchedule", "NO_EXECUTE": "NoExecute"}
CAPACITIES = ("spot", "on_demand", "spot_with_floor")
GPUS_PER_NODE = 8  # the templates' gpus-per-node default: what a train pod asks for

Labels = dict[str, str]
Taint = dict[str, str]


# --------------------------------------------------------------------------- the Terraform
def _block(text: str, start: str) -> str:
    """The text of the brace block of the first line that begins with ``start``."""
    m = re.search(rf"^[ \t]*{re.escape(start)}", text, re.M)
    assert m, f"no {start}"
    i = text.index("{", m.end())
    depth = 0
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            return text[i : j + 1]
    raise AssertionError(f"unbalanced block after {start!r}")


def _hcl_map(text: str) -> dict[str, str]:
    """A map literal's ``"key" = expression`` pairs (expressions as text)."""
    return dict(re.findall(r'"([^"]+)"\s*=\s*([^,\n}]+?)\s*(?:,|\n|})', text))


def _eval(expr: str, env: dict[str, str]) -> str:
    """The few expression forms the label maps use: "literal", var.x, lower(var.x)."""
    expr = expr.strip()
    if m := re.fullmatch(r'"([^"$]*)"', expr):
        return m.group(1)
    if m := re.fullmatch(r"var\.(\w+)", expr):
        return env[m.group(1)]
    if m := re.fullmatch(r"lower\(var\.(\w+)\)", expr):
        return env[m.group(1)].lower()
    raise AssertionError(f"label expression the test does not read: {expr}")


@dataclass
class NodeGroup:
    labels: Labels
    taints: list[Taint]


@dataclass
class Rented:
    """What one candidate's stack makes: its node groups, and the selector and tolerations
    its outputs hand the train pods."""

    groups: list[NodeGroup]
    selector: Labels
    tolerations: list[dict[str, str]]


def aws_rented(gpu: str, region: str, capacity: str) -> Rented:
    """terraform/stacks/burst-run applying terraform/modules/aws-gpu-nodegroup."""
    stack = (STACKS / "burst-run" / "main.tf").read_text()
    call = _block(stack, 'module "nodegroup"')
    assert re.search(r'capacity_type\s*=\s*local\.spot \? "SPOT" : "ON_DEMAND"', call)
    assert re.search(r'spot\s*=\s*var\.capacity != "on_demand"', stack)
    assert re.search(r'floor\s*=\s*var\.capacity == "spot_with_floor"', stack)
    assert not re.search(r"^\s*labels\s*=", call, re.M), "burst-run now passes node labels"
    capacity_type = "ON_DEMAND" if capacity == "on_demand" else "SPOT"
    floor = capacity == "spot_with_floor"
    env = {"accelerator": gpu, "run_id": RUN, "capacity_type": capacity_type, "region": region}
    main = (MODULES / "aws-gpu-nodegroup" / "main.tf").read_text()
    local = re.search(r"labels = merge\(var\.labels, (\{.*?\})\)", main, re.S)
    assert local, "aws-gpu-nodegroup no longer builds local.labels as expected"
    base = {k: _eval(v, env) for k, v in _hcl_map(local.group(1)).items()}

    def group(name: str) -> NodeGroup:
        body = _block(main, f'resource "aws_eks_node_group" "{name}"')
        extra = re.search(r"labels\s*=\s*merge\(local\.labels, (\{[^}]*\})\)", body)
        assert extra, f"node group {name}: labels no longer merge local.labels"
        labels = base | {k: _eval(v, env) for k, v in _hcl_map(extra.group(1)).items()}
        # the cloud's own label: EC2 nodes of EKS carry their region (the AWS cloud provider)
        labels["topology.kubernetes.io/region"] = region
        taints = []
        for m in re.finditer(r'(dynamic "taint" \{.*?\n  \}|\n  taint \{.*?\n  \})', body, re.S):
            cond = re.search(r'capacity_type == "(\w+)"', m.group(1))
            if cond and cond.group(1) != capacity_type:
                continue
            k, v, e = re.search(  # type: ignore[union-attr]
                r'key\s*=\s*"([^"]+)"\s*value\s*=\s*"([^"]*)"\s*effect\s*=\s*"(\w+)"', m.group(1)
            ).groups()
            taints.append({"key": k, "value": v, "effect": EKS_EFFECTS[e]})
        return NodeGroup(labels, taints)

    groups = [group("main")]
    if floor:
        groups.append(group("on_demand_floor"))
    outputs = (MODULES / "aws-gpu-nodegroup" / "outputs.tf").read_text()
    sel = _block(outputs, 'output "node_selector"')
    first = re.search(r"merge\(\s*(\{[^}]*\})", sel)
    assert first, "aws-gpu-nodegroup's node_selector is no longer a merge"
    selector = {k: _eval(v, env) for k, v in _hcl_map(first.group(1)).items()}
    cond = re.search(
        r'var\.capacity_type == "SPOT" && var\.on_demand_floor > 0 \? \{\} : (\{[^}]*\})', sel
    )
    assert cond, "aws-gpu-nodegroup's node_selector no longer drops capacity under a floor"
    if not floor:
        selector |= {k: _eval(v, env) for k, v in _hcl_map(cond.group(1)).items()}
    stack_out = _block((STACKS / "burst-run" / "outputs.tf").read_text(), 'output "node_selector"')
    region_key = re.search(r'"([^"]+)"\s*=\s*var\.region', stack_out)
    assert region_key, "burst-run's node_selector no longer adds the region"
    selector[region_key.group(1)] = region
    tol = _block(outputs, 'output "tolerations"')
    tolerations = []
    for line in tol.splitlines():
        c = re.search(r'capacity_type == "(\w+)"', line)
        if c and c.group(1) != capacity_type:
            continue
        for m in re.finditer(r"\{\s*(key\s*=[^}]*)\}", line):
            tolerations.append({k: v for k, v in re.findall(r'(\w+)\s*=\s*"([^"]*)"', m.group(1))})
    return Rented(groups, selector, tolerations)


def hybrid_rented(stack: str, gpu: str, region: str, capacity: str) -> Rented:
    """terraform/stacks/<stack> (gcp-run, azure-run, nebius-run): its VMs join the home EKS
    cluster through terraform/modules/aws-hybrid-join, every node with the same labels and
    taints (nodeadm's --node-labels and --register-with-taints), whatever its pool."""
    env = {"accelerator": gpu, "capacity": capacity, "run_id": RUN, "region": region}
    text = (STACKS / stack / "main.tf").read_text()
    node_labels = re.search(r"node_labels = (\{[^}]*\})", text)
    assert node_labels, f"{stack}: no node_labels local"
    labels = {k: _eval(v, env) for k, v in _hcl_map(node_labels.group(1)).items()}
    assert re.search(r"node_labels\s*=\s*local\.node_labels", _block(text, 'module "home"'))
    run_taint = re.search(r'run_taint = "([^"]+)"', text)
    assert run_taint and re.search(r"node_taints\s*=\s*\[local\.run_taint\]", text)
    join = (MODULES / "aws-hybrid-join" / "main.tf").read_text()
    merged = re.search(r"labels\s*=\s*merge\(var\.node_labels, (\{[^}]*\})\)", join)
    assert merged, "aws-hybrid-join no longer builds local.labels as expected"
    labels |= {k: _eval(v, env) for k, v in _hcl_map(merged.group(1)).items()}
    assert re.search(r'"--node-labels=\$\{join\(",", \[for k, v in local\.labels', join)
    base = re.search(r'taints\s*=\s*concat\(\["([^"]+)"\], var\.node_taints\)', join)
    assert base
    taints = []
    for t in (base.group(1), run_taint.group(1).replace("${var.run_id}", RUN)):
        kv, effect = t.rsplit(":", 1)
        k, _, v = kv.partition("=")
        taints.append({"key": k, "value": v, "effect": effect})
    outputs = (MODULES / "aws-hybrid-join" / "outputs.tf").read_text()
    sel = _block(outputs, 'output "node_selector"')
    eks = re.search(r"merge\(local\.labels, (\{[^}]*\})\)", sel)
    assert eks, "aws-hybrid-join's node_selector is no longer its labels and EKS's"
    # EKS labels every hybrid node eks.amazonaws.com/compute-type: hybrid (the selector
    # relies on it); the region label is the stack's own (node_labels above)
    eks_labels = {k: _eval(v, env) for k, v in _hcl_map(eks.group(1)).items()}
    node = NodeGroup(labels | eks_labels, taints)
    tol = _block(outputs, 'output "tolerations"')
    assert 'operator = "Equal"' in tol  # one Equal toleration a taint
    tolerations = [
        {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
        for t in taints
    ]
    return Rented([node], labels | eks_labels, tolerations)


def rented(provider: str, gpu: str, region: str, capacity: str) -> Rented:
    stack = STACK_DIRS[PROVIDER_STACKS[provider]]
    if stack == "burst-run":
        return aws_rented(gpu, region, capacity)
    return hybrid_rented(stack, gpu, region, capacity)


# --------------------------------------------------------------------------- Kueue, modelled
def tolerates(t: dict[str, Any], taint: Taint) -> bool:
    """core/v1 Toleration.ToleratesTaint."""
    if t.get("effect") and t["effect"] != taint["effect"]:
        return False
    if t.get("key") and t["key"] != taint["key"]:
        return False
    if not t.get("key") and t.get("operator") != "Exists":
        return False
    if t.get("operator", "Equal") == "Exists":
        return True
    return str(t.get("value", "")) == taint.get("value", "")


def lands_on(spec: dict[str, Any], group: NodeGroup) -> bool:
    selector = spec.get("nodeSelector") or {}
    if any(group.labels.get(k) != v for k, v in selector.items()):
        return False
    hard = [t for t in group.taints if t["effect"] in ("NoSchedule", "NoExecute")]
    return all(any(tolerates(t, x) for t in spec.get("tolerations") or []) for x in hard)


#: The LocalQueue Kueue (LocalQueueDefaulting) puts a pod that names no queue in.
DEFAULT_LOCAL_QUEUE = "default"


def argo(value: str, team: str) -> str:
    """A template's label value as Argo substitutes it in a workflow of ``team``."""
    return value.replace("{{workflow.parameters.team}}", team)


@dataclass
class Queues:
    flavors: dict[str, dict[str, Any]]
    queues: dict[str, dict[str, Any]]
    #: LocalQueues by (namespace, name)
    local: dict[tuple[str, str], dict[str, Any]]

    @classmethod
    def of(cls, objects: list[dict[str, Any]]) -> Queues:
        return cls(
            {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceFlavor"},
            {o["metadata"]["name"]: o for o in objects if o["kind"] == "ClusterQueue"},
            {
                (o["metadata"]["namespace"], o["metadata"]["name"]): o
                for o in objects
                if o["kind"] == "LocalQueue"
            },
        )

    @classmethod
    def load(cls, *paths: Path) -> Queues:
        return cls.of([d for p in paths for d in yaml.safe_load_all(p.read_text()) if d])

    def local_queue(self, labels: Labels, namespace: str = NAMESPACE) -> str | None:
        """The LocalQueue a pod with these (substituted) labels is queued in: the one its
        queue-name label names, or, for a pod that names none, the namespace's ``default``
        when it exists (LocalQueueDefaulting); None: the pod is not queued."""
        if KUEUE_QUEUE_LABEL in labels:
            return labels[KUEUE_QUEUE_LABEL]
        if (namespace, DEFAULT_LOCAL_QUEUE) in self.local:
            return DEFAULT_LOCAL_QUEUE
        return None

    def cluster_queue(self, labels: Labels, namespace: str = NAMESPACE) -> str | None:
        """The ClusterQueue a pod is admitted in: its LocalQueue's (looked up by the pod's
        namespace and the LocalQueue's name); None when it names a LocalQueue that does not
        exist (the Workload is inadmissible: the pod stays gated) or is not queued."""
        name = self.local_queue(labels, namespace)
        lq = self.local.get((namespace, name)) if name is not None else None
        return None if lq is None else str(lq["spec"]["clusterQueue"])

    def group(self, cq: str) -> dict[str, Any]:
        (rg,) = [
            rg
            for rg in self.queues[cq]["spec"]["resourceGroups"]
            if "nvidia.com/gpu" in rg["coveredResources"]
        ]
        return rg  # type: ignore[no-any-return]

    def reachable(self, cq: str, flavor: str) -> int:
        def gpu(q: dict[str, Any]) -> tuple[int, int | None]:
            for rg in q["spec"]["resourceGroups"]:
                for f in rg["flavors"]:
                    if f["name"] == flavor:
                        for r in f["resources"]:
                            if r["name"] == "nvidia.com/gpu":
                                return int(r["nominalQuota"]), r.get("borrowingLimit")
            return 0, 0

        cohort = sum(gpu(q)[0] for q in self.queues.values())
        nominal, limit = gpu(self.queues[cq])
        return min(cohort, nominal + limit if limit is not None else cohort)

    def admit(self, cq: str, spec: dict[str, Any], gpus: int) -> str | None:
        """The flavor the ClusterQueue ``cq`` admits a pod under (quota free), or None (never
        admitted)."""
        rg = self.group(cq)
        keys = {k for f in rg["flavors"] for k in self.flavors[f["name"]]["spec"]["nodeLabels"]}
        selector = {k: v for k, v in (spec.get("nodeSelector") or {}).items() if k in keys}
        for f in rg["flavors"]:
            fs = self.flavors[f["name"]]["spec"]
            tols = [*(spec.get("tolerations") or []), *(fs.get("tolerations") or [])]
            if any(
                not any(tolerates(t, x) for t in tols)
                for x in fs.get("nodeTaints") or []
                if x["effect"] in ("NoSchedule", "NoExecute")
            ):
                continue
            if any(fs["nodeLabels"].get(k) != v for k, v in selector.items()):
                continue
            if self.reachable(cq, f["name"]) < gpus:
                continue
            return str(f["name"])
        return None

    def inject(self, spec: dict[str, Any], flavor: str) -> dict[str, Any]:
        """podset.Merge: the flavor's nodeLabels into the selector (a conflict is an error),
        its tolerations appended unless an equal one is there."""
        fs = self.flavors[flavor]["spec"]
        selector = dict(spec.get("nodeSelector") or {})
        for k, v in fs["nodeLabels"].items():
            if k in selector and selector[k] != v:
                raise AssertionError(f"conflict for key={k}: {selector[k]} vs {v}")
            selector[k] = v
        tolerations = list(spec.get("tolerations") or [])
        tolerations += [t for t in fs.get("tolerations") or [] if t not in tolerations]
        return {**spec, "nodeSelector": selector, "tolerations": tolerations}


# --------------------------------------------------------------------------- the pods
@functools.cache
def _compiled(wf: str) -> dict[str, Any]:
    """A compiled template, parsed once (only read)."""
    manifest: dict[str, Any] = yaml.safe_load((COMPILED / f"{wf}.yaml").read_text())
    return manifest


def gpu_pods(
    selector: Labels, tolerations: list[dict[str, str]]
) -> list[tuple[str, Labels, dict[str, Any]]]:
    """Every pod of the compiled templates that takes GPUs, as Argo (podSpecPatch) or Volcano
    (the gang's task templates) creates it with provision's selector and tolerations, and with
    the queue its run's Workload names (the train pods carry no queue label: provision's
    Workload, burst/admission/kueue_workload.py, holds their quota with their selector and
    tolerations, so Kueue admits it as it would have admitted them): (name, labels, spec)."""
    subs = {
        "{{inputs.parameters.node-selector}}": json.dumps(selector),
        "{{inputs.parameters.tolerations}}": json.dumps(tolerations),
    }
    queued = {
        KUEUE_QUEUE_LABEL: "burst-{{workflow.parameters.team}}",
        KUEUE_PRIORITY_LABEL: "burst-{{workflow.parameters.priority}}",
    }
    out = []
    for wf in ("burst-train", "burst-regional"):
        for t in _compiled(wf)["spec"]["templates"]:
            labels = {**((t.get("metadata") or {}).get("labels") or {}), **queued}
            if "nvidia.com/gpu" in (t.get("podSpecPatch") or ""):
                text = t["podSpecPatch"]
                for tag, value in subs.items():
                    text = text.replace(tag, value)
                out.append((f"{wf}/{t['name']}", labels, json.loads(text)))
            if "resource" in t and "nvidia.com/gpu" in t["resource"]["manifest"]:
                text = t["resource"]["manifest"]
                for tag in UNQUOTED:
                    text = text.replace(tag, subs.get(tag, "2"))
                job = yaml.safe_load(text)
                for task in job["spec"]["tasks"]:
                    tpl = task["template"]
                    tpl_labels = {**tpl["metadata"]["labels"], **queued}
                    out.append((f"{wf}/{t['name']}/{task['name']}", tpl_labels, tpl["spec"]))
    return out


def step_pods() -> list[tuple[str, Labels, dict[str, Any]]]:
    """Every other pod the compiled templates create in burst's namespace (preflight,
    provision, teardown, the resource templates' pods, ...): the workflow's pod labels and the
    template's own, its node selector and tolerations (name, labels, spec)."""
    out = []
    for wf in ("burst-train", "burst-regional"):
        spec = _compiled(wf)["spec"]
        common = ((spec.get("podMetadata") or {}).get("labels")) or {}
        for t in spec["templates"]:
            if not any(k in t for k in ("container", "script", "resource")):
                continue  # steps and DAGs create no pod
            labels = {**common, **((t.get("metadata") or {}).get("labels") or {})}
            if "nvidia.com/gpu" in json.dumps(t.get("podSpecPatch") or t.get("resource") or ""):
                continue  # (gpu_pods)
            placed = {k: t.get(k) or spec.get(k) for k in ("nodeSelector", "tolerations")}
            out.append((f"{wf}/{t['name']}", labels, {k: v for k, v in placed.items() if v}))
    return out


def test_the_pods_kueue_queues_are_found() -> None:
    names = {n for n, _, _ in gpu_pods({}, [])}
    assert {
        "burst-train/train",
        "burst-train/train-gang/master",
        "burst-train/train-gang/worker",
        "burst-regional/train",
    } <= names


# --------------------------------------------------------------------------- the checks
@functools.cache
def offers(provider: str) -> tuple[tuple[str, str], ...]:
    cat = load_catalog(use_env=False)
    return tuple(
        sorted({(o.region, o.gpu_type) for o in cat.offers.values() if o.provider == provider})
    )


def placement_problems(queues: Queues, provider: str) -> list[str]:
    """Each way a pod of a run on ``provider`` is not admitted, or admitted where it cannot
    run, for every offer of the provider and every capacity type."""
    out = []
    teams = sorted(team_quotas())  # the teams a spec may name (deploy/gpu-quota.yaml)
    for region, gpu in offers(provider):
        for capacity in CAPACITIES:
            r = rented(provider, gpu, region, capacity)
            for name, labels, spec in gpu_pods(r.selector, r.tolerations):
                where = f"{provider}/{region}/{gpu}/{capacity} {name}"
                assert labels[KUEUE_PRIORITY_LABEL] == "burst-{{workflow.parameters.priority}}"
                for team in teams:
                    pod_labels = {k: argo(v, team) for k, v in labels.items()}
                    cq = queues.cluster_queue(pod_labels)
                    if cq is None:
                        lq = pod_labels[KUEUE_QUEUE_LABEL]
                        out.append(f"{where} ({team}): no LocalQueue {NAMESPACE}/{lq}")
                        continue
                    if cq != team:
                        out.append(f"{where} ({team}): queued in ClusterQueue {cq}")
                        continue
                    flavor = queues.admit(cq, spec, GPUS_PER_NODE)
                    if flavor is None:
                        out.append(f"{where} ({team}): never admitted")
                        continue
                    admitted = queues.inject(spec, flavor)
                    if not any(lands_on(admitted, g) for g in r.groups):
                        extra = {
                            k: v
                            for k, v in admitted["nodeSelector"].items()
                            if all(g.labels.get(k) != v for g in r.groups)
                        }
                        out.append(
                            f"{where} ({team}): admitted under {flavor}, lands nowhere {extra}"
                        )
    return out


@pytest.mark.parametrize("provider", sorted(PROVIDER_STACKS))
def test_every_provider_s_pods_are_admitted_and_land_on_its_nodes(provider: str) -> None:
    """deploy/kueue holds the flavors of the providers the site rents on (burst kueue
    --provider; by default every provider burst provisions on a cloud stack): their pods are
    admitted and land on their nodes. A pod of another provider is never admitted (it stays
    gated): it is not taken under a flavor of another provider's nodes."""
    assert offers(provider), f"the catalog offers nothing on {provider}"
    queues = Queues.load(*sorted(KUEUE.glob("*.yaml")))
    scope = {f["metadata"]["labels"][LABEL_PROVIDER] for f in queues.flavors.values()}
    problems = placement_problems(queues, provider)
    if provider in scope:
        assert problems == []
    else:
        assert problems and all(p.endswith("never admitted") for p in problems)


def _scopes() -> list[tuple[str, ...]]:
    """The provider sets a site may name: each provider alone, each with the home cluster's
    own (aws), and every provider (with a Kueue that lifts the LocalQueue status limit)."""
    out = {tuple(PROVIDER_STACKS)}
    for p in PROVIDER_STACKS:
        out |= {(p,), tuple(dict.fromkeys(("aws", p)))}
    return sorted(out)


@pytest.mark.parametrize("scope", _scopes(), ids=",".join)
def test_the_generated_objects_place_every_provider_s_pods(scope: tuple[str, ...]) -> None:
    """The generator's objects (what a test on a real Kueue applies), not only the files, for
    the provider sets a site may rent on: every pod of those providers is admitted and lands
    on its nodes, whatever other providers' flavors share its ClusterQueue."""
    objects = kueue_objects(providers=scope, local_queue_status_64=scope == tuple(PROVIDER_STACKS))
    for provider in scope:
        assert placement_problems(Queues.of(objects), provider) == [], provider


def test_before_hybrid_runs_and_other_gpus_were_never_admitted() -> None:
    # the old flavors and ClusterQueues (named after the teams, as today's), with the
    # LocalQueues today's pods name: what fails is the flavors
    old = Queues.load(
        BEFORE / "deploy_kueue_flavors.yaml",
        BEFORE / "deploy_kueue_clusterqueues.yaml",
        KUEUE / "localqueues.yaml",
    )
    assert set(old.queues) == set(team_quotas())
    gcp = placement_problems(old, "gcp")
    assert not any("no LocalQueue" in p or "queued in ClusterQueue" in p for p in gcp)
    # the old flavors are AWS h100 node groups': the hybrid nodes' region names none of them
    # (before the hybrid nodes carried it, Kueue admitted the pod under one and added an AWS
    # region the nodes lacked: it landed nowhere)
    assert any("/h100/" in p and "never admitted" in p for p in gcp)
    assert any("b200" in p and "never admitted" in p for p in gcp)
    assert any("spot_with_floor" in p and "never admitted" in p for p in gcp)
    aws = placement_problems(old, "aws")
    assert any("h200" in p and "never admitted" in p for p in aws)
    # not every pod: the old files' own runs (AWS h100 in their regions) were admitted
    regions = {
        f["spec"]["nodeLabels"]["topology.kubernetes.io/region"] for f in old.flavors.values()
    }
    assert regions and not any(f"aws/{r}/h100/" in p for p in aws for r in regions)


#: deploy/kueue/localqueues.yaml before the LocalQueues were burst-<team> (757c5ed to
#: 8039a09): one per team, named after it, so the team `default`'s was called `default`.
OLD_LOCAL_QUEUES = [
    {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": team, "namespace": NAMESPACE},
        "spec": {"clusterQueue": team},
    }
    for team in ("default", "ml-research")
]


def test_a_step_pod_is_never_queued_where_the_old_default_local_queue_pinned_it_to_gpus() -> None:
    """Kueue's LocalQueueDefaulting (v0.17.0, on by default) puts a pod of a managed namespace
    that names no queue in the namespace's LocalQueue called ``default``. The team ``default``'s
    LocalQueue was so named: every step pod (preflight, provision, teardown, ...) was admitted
    in that team's ClusterQueue under a GPU flavor, which pinned it to GPU nodes (found on the
    engines tier). Today no LocalQueue is called ``default``: the step pods are not queued,
    and the train pods still reach their team's ClusterQueue."""
    steps = step_pods()
    names = {n for n, _, _ in steps}
    assert {"burst-train/preflight", "burst-train/provision", "burst-train/teardown"} <= names
    objects = [
        d for p in sorted(KUEUE.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d
    ]
    now = Queues.of(objects)
    assert (NAMESPACE, DEFAULT_LOCAL_QUEUE) not in now.local
    for name, labels, _ in steps:
        for team in team_quotas():
            pod = {k: argo(v, team) for k, v in labels.items()}
            assert now.local_queue(pod) is None, name
    old = Queues.of([o for o in objects if o["kind"] != "LocalQueue"] + OLD_LOCAL_QUEUES)
    for name, labels, spec in steps:
        pod = {k: argo(v, "ml-research") for k, v in labels.items()}  # whatever the team
        assert old.cluster_queue(pod) == "default", name
        flavor = old.admit("default", spec, 0)  # a step pod asks for no GPU
        assert flavor is not None, name
        admitted = old.inject(spec, flavor)
        gpu_nodes = old.flavors[flavor]["spec"]["nodeLabels"]
        assert "accelerator" in gpu_nodes and admitted["nodeSelector"] == gpu_nodes, name
    # and the old label (the team alone) found the old queues: the defect was the name
    # `default`, not the lookup
    assert old.cluster_queue({KUEUE_QUEUE_LABEL: "ml-research"}) == "ml-research"


@pytest.mark.parametrize("provider", sorted(PROVIDER_STACKS))
def test_each_flavor_names_exactly_the_labels_and_taints_of_its_provider_s_nodes(
    provider: str,
) -> None:
    """A flavor's nodeLabels are the labels every node of its provider, region, GPU and
    capacity carries, but the run's own; its tolerations are the stack's own tolerations of
    taints those nodes carry (so Kueue adds nothing the pod did not have)."""
    objects = kueue_objects(providers=PROVIDER_STACKS, local_queue_status_64=True)
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    seen = 0
    for region, gpu in offers(provider):
        for capacity in CAPACITIES:
            r = rented(provider, gpu, region, capacity)
            for g in r.groups:
                cap = g.labels["burst/capacity"]
                name = f"{gpu}-{region}-{cap.replace('_', '')}"
                (f,) = [f for f in flavors if f["metadata"]["name"] == name]
                expected = {k: v for k, v in g.labels.items() if k != "burst/run-id"}
                assert f["spec"]["nodeLabels"] == expected, name
                for t in f["spec"].get("tolerations") or []:
                    assert t in r.tolerations, f"{name}: {t} is not the stack's toleration"
                    assert any(tolerates(t, x) for x in g.taints), f"{name}: {t} tolerates no taint"
                fixed = [x for x in g.taints if x["key"] != "burst/run-id"]
                assert all(
                    any(tolerates(t, x) for t in f["spec"].get("tolerations") or []) for x in fixed
                ), name
                seen += 1
    assert seen


def test_the_node_profiles_cover_every_stack() -> None:
    assert set(NODE_PROFILES) == set(STACK_DIRS)


def test_the_terraform_readers_see_the_nodes() -> None:
    r = rented("aws", "h100", "ap-southeast-3", "spot_with_floor")
    assert [g.labels["burst/capacity"] for g in r.groups] == ["spot", "on_demand"]
    assert "burst/capacity" not in r.selector
    assert r.selector["topology.kubernetes.io/region"] == "ap-southeast-3"
    assert {t["key"] for t in r.groups[0].taints} == {"nvidia.com/gpu", "spot"}
    assert {t["key"] for t in r.groups[1].taints} == {"nvidia.com/gpu"}
    h = rented("nebius", "h200", "eu-north1", "spot_with_floor")
    assert h.selector["burst/capacity"] == "spot_with_floor"
    assert h.selector["eks.amazonaws.com/compute-type"] == "hybrid"
    # the hybrid stacks label their nodes with the region (no cloud provider does)
    assert h.groups[0].labels["topology.kubernetes.io/region"] == "eu-north1"
    assert h.selector["topology.kubernetes.io/region"] == "eu-north1"
    assert {"key": "burst/run-id", "value": RUN, "effect": "NoSchedule"} in h.groups[0].taints
