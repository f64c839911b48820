"""Scheduling onto the rented GPUs: every GPU pod, and the NVIDIA device plugin DaemonSet,
tolerate every taint of the node group or hybrid node they must land on, and every pod that
runs the trainer image asks for the node's GPUs and is steered to its run's (its region's)
nodes.

Taints and tolerations as Kubernetes matches them (k8s.io/api core/v1 toleration.go
``Toleration.ToleratesTaint``: the keys equal, or an empty key with ``Exists``; ``Exists``, or
``Equal`` with equal values; an empty effect matches every effect); a pod (and a DaemonSet's
pod: pkg/controller/daemon ``predicates``) may land on a node only when it tolerates each of
its NoSchedule and NoExecute taints (scheduler plugin TaintToleration). A GPU is an extended
resource: the pod gets it only by asking (requests == limits). The node groups' taints and the
tolerations provision hands to train are read from the Terraform modules that make them.
Walk: docs/reference/device-plugin.md."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from argo_pods import SAMPLE, pods
from test_kueue_providers import tolerates  # core/v1 Toleration.ToleratesTaint, once

REPO = Path(__file__).resolve().parents[2]
MODULES = REPO / "terraform" / "modules"
STACKS = REPO / "terraform" / "stacks"
BEFORE = Path(__file__).resolve().parent / "before"
COMPILED = REPO / "burst" / "pipelines" / "compiled"
EKS_EFFECTS = {
    "NO_SCHEDULE": "NoSchedule",
    "NO_EXECUTE": "NoExecute",
    "PREFER_NO_SCHEDULE": "PreferNoSchedule",
}
#: NVIDIA's own DaemonSet (k8s-device-plugin deployments/static/nvidia-device-plugin.yml,
#: v0.20.0): what a cluster admin installed before deploy/ shipped one
NVIDIA_STATIC_TOLERATIONS = [
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
]
SAMPLE_NODE_TAINTS = ["dedicated=ml:NoExecute"]  # a site's own hybrid node taint


def untolerated(tolerations: list[dict[str, Any]], taints: list[dict[str, str]]) -> list[str]:
    return [
        f"{x['key']}={x.get('value', '')}:{x['effect']}"
        for x in taints
        if x["effect"] in ("NoSchedule", "NoExecute")
        and not any(tolerates(t, x) for t in tolerations)
    ]


def _parse_taint(text: str) -> dict[str, str]:
    kv, effect = text.rsplit(":", 1)
    key, _, value = kv.partition("=")
    return {"key": key, "value": value, "effect": effect}


def nodegroup_nodes() -> dict[str, tuple[list[dict[str, str]], list[dict[str, Any]]]]:
    """aws-gpu-nodegroup, per capacity type: the node group's taints (its ``taint`` blocks,
    the spot one under ``capacity_type == "SPOT"``) and the ``tolerations`` output train gets."""
    text = (MODULES / "aws-gpu-nodegroup" / "main.tf").read_text()
    main = text.split('resource "aws_eks_node_group" "main"', 1)[1].split("\nresource ", 1)[0]
    block = re.compile(r'key\s*=\s*"([^"]+)"\s*value\s*=\s*"([^"]*)"\s*effect\s*=\s*"([A-Z_]+)"')
    static = [m for m in re.finditer(r"\n  taint \{(.*?)\n  \}", main, re.S)]
    dynamic = [m for m in re.finditer(r'dynamic "taint" \{(.*?)\n  \}', main, re.S)]
    outputs = (MODULES / "aws-gpu-nodegroup" / "outputs.tf").read_text()
    tol_text = outputs.split('output "tolerations"', 1)[1].split("\noutput ", 1)[0]
    obj = re.compile(
        r"\{\s*key\s*=\s*\"([^\"]+)\",\s*operator\s*=\s*\"(\w+)\",(?:\s*value\s*=\s*\"([^\"]*)\",)?\s*effect\s*=\s*\"(\w+)\"\s*\}"
    )
    out = {}
    for capacity in ("SPOT", "ON_DEMAND"):
        taints = []
        for m in static:
            k, v, e = block.search(m.group(1)).groups()  # type: ignore[union-attr]
            taints.append({"key": k, "value": v, "effect": EKS_EFFECTS[e]})
        for m in dynamic:
            cond = re.search(r'capacity_type == "(\w+)"', m.group(1))
            if cond and cond.group(1) == capacity:
                k, v, e = block.search(m.group(1)).groups()  # type: ignore[union-attr]
                taints.append({"key": k, "value": v, "effect": EKS_EFFECTS[e]})
        tolerations = []
        for line in tol_text.splitlines():
            cond = re.search(r'capacity_type == "(\w+)"', line)
            if cond and cond.group(1) != capacity:
                continue
            for k, op, v, e in obj.findall(line):
                t = {"key": k, "operator": op, "effect": e}
                if v:
                    t["value"] = v
                tolerations.append(t)
        out[f"aws-gpu-nodegroup/{capacity}"] = (taints, tolerations)
    return out


def hybrid_nodes() -> dict[str, tuple[list[dict[str, str]], list[dict[str, Any]]]]:
    """aws-hybrid-join (the gcp, azure and nebius stacks' rented nodes): nodeadm's
    ``--register-with-taints`` (``local.taints``: nvidia.com/gpu, the stack's run taint and a
    site's ``node_taints``), and the ``tolerations`` output (one Equal toleration a taint)."""
    main = (MODULES / "aws-hybrid-join" / "main.tf").read_text()
    base = re.search(r'taints\s*=\s*concat\(\["([^"]+)"\], var\.node_taints\)', main)
    assert base, "aws-hybrid-join no longer builds its taints as expected"
    out = {}
    for stack in ("gcp-run", "azure-run", "nebius-run"):
        text = (STACKS / stack / "main.tf").read_text()
        run = re.search(r'run_taint\s*=\s*"([^"]+)"', text)
        texts = [
            base.group(1),
            *([run.group(1).replace("${var.run_id}", "r")] if run else []),
            *SAMPLE_NODE_TAINTS,
        ]
        taints = [_parse_taint(t) for t in texts]
        tolerations = [
            {"key": t["key"], "operator": "Equal", "value": t["value"], "effect": t["effect"]}
            for t in taints
        ]
        out[f"{stack}/hybrid"] = (taints, tolerations)
    return out


def device_plugin_tolerations(path: Path) -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    return ds["spec"]["template"]["spec"].get("tolerations") or []  # type: ignore[no-any-return]


NODES = {**nodegroup_nodes(), **hybrid_nodes()}


def test_the_parsers_see_the_taints() -> None:
    assert {t["key"] for t in NODES["aws-gpu-nodegroup/SPOT"][0]} == {"nvidia.com/gpu", "spot"}
    assert {t["key"] for t in NODES["aws-gpu-nodegroup/ON_DEMAND"][0]} == {"nvidia.com/gpu"}
    assert "burst/run-id" in {t["key"] for t in NODES["gcp-run/hybrid"][0]}


@pytest.mark.parametrize("node", sorted(NODES))
def test_train_tolerates_every_taint_of_its_nodes(node: str) -> None:
    taints, tolerations = NODES[node]
    assert untolerated(tolerations, taints) == []


@pytest.mark.parametrize("node", sorted(NODES))
def test_the_device_plugin_lands_on_every_rented_node(node: str) -> None:
    taints, _ = NODES[node]
    shipped = REPO / "deploy" / "device-plugin" / "nvidia-device-plugin.yaml"
    assert untolerated(device_plugin_tolerations(shipped), taints) == []


def test_before_issue_28_nvidias_plugin_skipped_spot_and_hybrid_nodes() -> None:
    missed = {
        n for n, (taints, _) in NODES.items() if untolerated(NVIDIA_STATIC_TOLERATIONS, taints)
    }
    assert {"aws-gpu-nodegroup/SPOT", "gcp-run/hybrid"} <= missed


def gpu_pod_problems(manifest: dict[str, Any]) -> list[str]:
    """Every pod that runs the trainer image asks for the node's GPUs (requests == limits)
    and is steered to the nodes its run's provision made (their selector and taints)."""
    out = []
    for p in pods(manifest, {}, False):
        # the regional aggregator runs on the trainer image for torch (issue 27: it failed on
        # import in the steps image) and averages on CPU: not a GPU pod
        mains = [
            c
            for c in p.spec["containers"]
            if "trainer-image" in str(c.get("image"))
            and not {"burst.steps.regional_aggregator", "burst.steps.aggregate"}
            & set(c.get("command") or [])
        ]
        for c in mains:
            res = c.get("resources") or {}
            req = (res.get("requests") or {}).get("nvidia.com/gpu")
            if not req or req != (res.get("limits") or {}).get("nvidia.com/gpu"):
                out.append(f"{p.name}: asks for no GPU (requests == limits nvidia.com/gpu)")
            if p.spec.get("nodeSelector") != SAMPLE["{{inputs.parameters.node-selector}}"]:
                out.append(f"{p.name}: not steered to its run's nodes (nodeSelector)")
            if p.spec.get("tolerations") != SAMPLE["{{inputs.parameters.tolerations}}"]:
                out.append(f"{p.name}: does not tolerate its run's nodes' taints")
    return out


@pytest.mark.parametrize("name", ["burst-train", "burst-regional"])
def test_every_gpu_pod_asks_for_gpus_on_its_runs_nodes(name: str) -> None:
    manifest = yaml.safe_load((COMPILED / f"{name}.yaml").read_text())
    assert gpu_pod_problems(manifest) == []


def test_before_issue_28_regional_workers_ran_on_the_home_cluster_without_gpus() -> None:
    old = yaml.safe_load((BEFORE / "pipelines_compiled_burst-regional.yaml").read_text())
    problems = gpu_pod_problems(old)
    assert any("asks for no GPU" in p for p in problems)
    assert any("not steered" in p for p in problems)


def queue_problems(quota: Path, queues: Path | None) -> list[str]:
    """The gang's Volcano Job names its team's queue (burst/pipelines/gang.py: ``queue:
    '{{workflow.parameters.team}}'``); Volcano's admission refuses a Job whose queue does not
    exist or is not Open: every team with a GPU quota needs an Open Queue."""
    gang = yaml.safe_load((COMPILED / "burst-train.yaml").read_text())
    (t,) = [t for t in gang["spec"]["templates"] if t["name"] == "train-gang"]
    assert "queue: '{{workflow.parameters.team}}'" in t["resource"]["manifest"]
    teams = set(yaml.safe_load(quota.read_text())["data"])
    have = set()
    if queues is not None and queues.exists():
        for d in yaml.safe_load_all(queues.read_text()):
            if d and d["kind"] == "Queue" and (d.get("spec") or {}).get("state", "Open") == "Open":
                have.add(d["metadata"]["name"])
    return [f"team {team}: no Volcano queue" for team in sorted(teams - have)]


def test_before_issue_28_teams_had_no_volcano_queue() -> None:
    assert queue_problems(REPO / "deploy" / "gpu-quota.yaml", None)


def test_every_team_with_a_quota_has_a_queue() -> None:
    volcano = REPO / "deploy" / "volcano"
    assert queue_problems(REPO / "deploy" / "gpu-quota.yaml", volcano / "queues.yaml") == []


# --- the device plugin's placement (walk: docs/reference/walk-deploy.md) -----------------
def _term_matches(term: dict[str, Any], labels: dict[str, str]) -> bool:
    """A nodeSelectorTerm: every matchExpression holds (k8s component-helpers
    scheduling/corev1/nodeaffinity: In, NotIn, Exists, DoesNotExist)."""
    for e in term.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
    return True


def placed_on(path: Path, labels: dict[str, str]) -> bool:
    """Whether the DaemonSet's required node affinity admits a node with ``labels`` (terms
    are ORed; none: every node)."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    (ds,) = [d for d in docs if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    terms = required.get("nodeSelectorTerms") or []
    return not terms or any(_term_matches(t, labels) for t in terms)


def rented_node_labels() -> dict[str, dict[str, str]]:
    """The labels every node burst rents carries: the node group's ``local.labels`` and the
    hybrid join's ``--node-labels`` (both add ``burst/run-id``)."""
    out = {}
    for module in ("aws-gpu-nodegroup", "aws-hybrid-join"):
        text = (MODULES / module / "main.tf").read_text()
        assert re.search(r'"burst/run-id"\s*=\s*var\.run_id', text), module
        out[module] = {"burst/run-id": "r"}
    return out


PLUGIN = REPO / "deploy" / "device-plugin" / "nvidia-device-plugin.yaml"
CPU_NODE = {"kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "m6i.large"}


@pytest.mark.parametrize("module", sorted(rented_node_labels()))
def test_the_device_plugin_is_placed_on_every_rented_node(module: str) -> None:
    assert placed_on(PLUGIN, rented_node_labels()[module])


def test_the_device_plugin_stays_off_cpu_nodes() -> None:
    """On a node without NVML the plugin fails its init and exits (NVIDIA
    internal/plugin/factory.go getResourceManagers; failOnInitError defaults to true):
    tolerating every taint, it crash-looped on every CPU node of the home cluster."""
    assert not placed_on(PLUGIN, CPU_NODE)


def test_before_the_walk_the_plugin_ran_on_cpu_nodes() -> None:
    before = Path(__file__).resolve().parent / "before"
    assert placed_on(before / "deploy_device-plugin_nvidia-device-plugin.yaml", CPU_NODE)
