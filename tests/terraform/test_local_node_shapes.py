"""The local stack's nodes are shaped as each provider's real nodes.

The engines tier (devtools/cluster/tier.py) joins the nodes a run rents to a real cluster from
the local stack's state: each ``terraform_data.node``'s ``input`` gives the node's ``name``,
``labels``, ``taints`` ({key, value, effect}) and ``gpus``. A node shaped otherwise than the
provider's would let the tier schedule pods the real nodes refuse, or refuse pods they take.

For every provider with a stack and every capacity, one real ``terraform apply`` of
terraform/modules/local-nodegroup is compared with that provider's real Terraform:

* each node's labels and taints: the node group's (``rented`` of
  tests/deploy/test_kueue_providers.py reads them from the .tf files: aws-gpu-nodegroup's
  ``labels`` and ``taint`` blocks with the region the AWS cloud provider adds; the hybrid
  stacks' ``node_labels`` and ``run_taint`` through aws-hybrid-join's ``--node-labels`` and
  ``--register-with-taints``, with nodeadm's ``eks.amazonaws.com/compute-type: hybrid``),
  and on EKS managed node groups the labels EKS adds, read here from each
  ``aws_eks_node_group``'s own ``capacity_type`` and ``node_group_name_prefix``;
* the stack's ``node_selector`` and ``tolerations`` outputs;
* each node's GPUs (the run's GPUs per node).
"""

from __future__ import annotations

import copy
import json
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2
import pytest

from burst.infra.terraform import REPO_ROOT, terraform_argv, terraform_env
from burst.providers import PROVIDER_STACKS, STACK_DIRS
from tests.deploy.test_kueue_providers import CAPACITIES, RUN, rented

LOCAL = REPO_ROOT / "terraform" / "modules" / "local-nodegroup"
NODEGROUP = REPO_ROOT / "terraform" / "modules" / "aws-gpu-nodegroup" / "main.tf"
GPU = "h100"
NODES = 3
# a catalog region of each provider with a stack
REGIONS = {
    "aws": "ap-southeast-1",
    "gcp": "asia-southeast1",
    "azure": "southeastasia",
    "nebius": "eu-north1",
}
# rented()'s node groups of an EKS stack, in its order, by their resource names
EKS_GROUPS = ("main", "on_demand_floor")

Labels = dict[str, str]


@dataclass(frozen=True)
class Case:
    provider: str
    capacity: str
    floor: int  # what the emulation must make of the inputs below
    gpus: int
    inputs: dict[str, Any] = field(default_factory=dict)  # on_demand_floor, gpus_per_node, site


def _cases() -> dict[str, Case]:
    cases = {
        f"{provider}/{capacity}": Case(
            provider,
            capacity,
            floor=1 if capacity == "spot_with_floor" else 0,
            gpus=4,
            inputs={"on_demand_floor": 1, "gpus_per_node": 4},
        )
        for provider in sorted(REGIONS)
        for capacity in CAPACITIES
    }
    # the site's values (the local root passes every cloud-stack variable JSON-encoded)
    cases["aws/site"] = Case(
        "aws",
        "spot_with_floor",
        floor=2,
        gpus=2,
        inputs={"site": {"on_demand_floor": "2", "gpus_per_node": "2"}},
    )
    # nothing given: 8 GPUs and one on-demand node (the stacks refuse a floor of none)
    cases["gcp/defaults"] = Case("gcp", "spot_with_floor", floor=1, gpus=8)
    cases["aws/defaults"] = Case("aws", "spot_with_floor", floor=1, gpus=8)
    return cases


CASES = _cases()


# --------------------------------------------------------------------------- the real nodes
def _unquote(value: Any) -> Any:
    return value[1:-1] if isinstance(value, str) and value[:1] == value[-1:] == '"' else value


def eks_labels(capacity: str) -> list[Labels]:
    """The labels EKS puts on the nodes of each managed node group (Amazon EKS User Guide,
    "Managed node groups"), in ``rented``'s group order: ``eks.amazonaws.com/capacityType``,
    the group's capacity type, and ``eks.amazonaws.com/nodegroup``, its name (the emulation's
    is the name prefix without its trailing '-'; EKS appends a unique suffix). Others EKS or
    the AWS cloud provider add (the zone, the instance type, the AMI, the launch template)
    have values the local stack does not know, and nothing burst runs selects on them."""
    doc = hcl2.loads(NODEGROUP.read_text())
    groups = {
        _unquote(name): body
        for block in doc["resource"]
        for kind, named in block.items()
        if _unquote(kind) == "aws_eks_node_group"
        for name, body in named.items()
    }
    assert set(groups) == set(EKS_GROUPS), f"aws-gpu-nodegroup's node groups: {sorted(groups)}"
    out = []
    for name in EKS_GROUPS:
        body = groups[name]
        kind = _unquote(body["capacity_type"])
        if kind == "${var.capacity_type}":  # burst-run: local.spot ? "SPOT" : "ON_DEMAND"
            kind = "ON_DEMAND" if capacity == "on_demand" else "SPOT"
        assert kind in ("SPOT", "ON_DEMAND"), f"{name}: capacity_type {body['capacity_type']}"
        prefix = _unquote(body["node_group_name_prefix"])
        assert prefix.endswith("-") and "${" in prefix, f"{name}: {prefix}"
        out.append(
            {
                "eks.amazonaws.com/capacityType": kind,
                "eks.amazonaws.com/nodegroup": prefix.replace("${var.run_id}", RUN)[:-1],
            }
        )
    return out


@dataclass
class Shapes:
    """What a run's nodes and pods look like: each node's labels and taints, the GPUs on each
    node, the pods' node selector and tolerations."""

    nodes: list[dict[str, Any]]
    gpus: list[Any]
    selector: Labels
    tolerations: list[dict[str, Any]]
    inputs: list[dict[str, Any]] = field(default_factory=list)  # the emulation's, whole


def real(case: Case) -> Shapes:
    r = rented(case.provider, GPU, REGIONS[case.provider], case.capacity)
    if STACK_DIRS[PROVIDER_STACKS[case.provider]] == "burst-run":
        sizes = [NODES - case.floor, case.floor]
        extra = eks_labels(case.capacity)
        assert len(r.groups) == (2 if case.capacity == "spot_with_floor" else 1)
        groups = [(g.labels | extra[i], g.taints, sizes[i]) for i, g in enumerate(r.groups)]
    else:  # hybrid nodes: every node alike, whatever its pool
        (g,) = r.groups
        groups = [(g.labels, g.taints, NODES)]
    nodes = [{"labels": labels, "taints": taints} for labels, taints, n in groups for _ in range(n)]
    return Shapes(nodes, [case.gpus] * NODES, r.selector, r.tolerations)


# --------------------------------------------------------------------------- the emulation
def _root(directory: Path) -> None:
    module: dict[str, Any] = {
        "for_each": {
            name: {
                "provider": c.provider,
                "region": REGIONS[c.provider],
                "capacity": c.capacity,
                "on_demand_floor": c.inputs.get("on_demand_floor"),
                "gpus_per_node": c.inputs.get("gpus_per_node"),
                "site": c.inputs.get("site", {}),
            }
            for name, c in CASES.items()
        },
        "source": LOCAL.as_posix(),
        "run_id": RUN,
        "gpu_type": GPU,
        "node_count": NODES,
        "region": "${each.value.region}",
        "cloud_provider": "${each.value.provider}",
        "capacity": "${each.value.capacity}",
        "on_demand_floor": "${each.value.on_demand_floor}",
        "gpus_per_node": "${each.value.gpus_per_node}",
        "site": "${each.value.site}",
    }
    config = {
        "module": {"case": module},
        "output": {
            "cases": {
                "value": "${{ for k, m in module.case : k => "
                "{ node_selector = m.node_selector, tolerations = m.tolerations } }}"
            }
        },
    }
    (directory / "main.tf.json").write_text(json.dumps(config, indent=2))


def _terraform(directory: Path, *args: str) -> str:
    proc = subprocess.run(
        [*terraform_argv(), f"-chdir={directory}", *args],
        capture_output=True,
        text=True,
        env=terraform_env(),
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, f"terraform {args[0]}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def node_inputs(state: dict[str, Any], module: str) -> list[dict[str, Any]]:
    """Each ``terraform_data.node`` input of one module instance, read as the tier reads it
    (``attributes.input.value``), by node index."""
    out = []
    for res in state.get("resources") or []:
        if res.get("module") == module and (res["type"], res["name"]) == ("terraform_data", "node"):
            for inst in sorted(res["instances"], key=lambda i: i.get("index_key", 0)):
                out.append(inst["attributes"]["input"]["value"])
    return out


@pytest.fixture(scope="module")
def emulated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Shapes]:
    """Every case applied by one real ``terraform apply`` (builtin provider only)."""
    root = tmp_path_factory.mktemp("local-node-shapes")
    _root(root)
    _terraform(root, "init", "-input=false", "-no-color")
    _terraform(root, "apply", "-auto-approve", "-input=false", "-no-color")
    state = json.loads((root / "terraform.tfstate").read_text())
    outputs = json.loads(_terraform(root, "output", "-json", "-no-color"))["cases"]["value"]
    shapes = {}
    for name in CASES:
        inputs = node_inputs(state, f'module.case["{name}"]')
        shapes[name] = Shapes(
            [{"labels": n.get("labels") or {}, "taints": n.get("taints") or []} for n in inputs],
            [n.get("gpus") for n in inputs],
            outputs[name]["node_selector"],
            outputs[name]["tolerations"],
            inputs,
        )
    return shapes


# --------------------------------------------------------------------------- the comparison
def _canonical(node: dict[str, Any]) -> str:
    taints = sorted(node["taints"], key=lambda t: json.dumps(t, sort_keys=True))
    return json.dumps({"labels": node["labels"], "taints": taints}, sort_keys=True)


def problems(name: str, want: Shapes, got: Shapes) -> list[str]:
    """How the emulated run differs from the real one (nothing: the same)."""
    out = []
    have, need = Counter(map(_canonical, got.nodes)), Counter(map(_canonical, want.nodes))
    for node, n in (have - need).items():
        out.append(f"{name}: {n} emulated node(s) the real stack does not make: {node}")
    for node, n in (need - have).items():
        out.append(f"{name}: {n} real node(s) not emulated: {node}")
    if got.gpus != want.gpus:
        out.append(f"{name}: gpus {got.gpus}, the run's {want.gpus}")
    if got.selector != want.selector:
        out.append(f"{name}: node_selector {got.selector}, the stack's {want.selector}")

    def key(t: dict[str, Any]) -> str:
        return json.dumps(t, sort_keys=True)

    if sorted(map(key, got.tolerations)) != sorted(map(key, want.tolerations)):
        out.append(f"{name}: tolerations {got.tolerations}, the stack's {want.tolerations}")
    return out


# --------------------------------------------------------------------------- the checks
def test_the_cases_cover_every_provider_with_a_stack() -> None:
    assert set(REGIONS) == set(PROVIDER_STACKS)
    assert {(c.provider, c.capacity) for c in CASES.values()} >= {
        (p, cap) for p in PROVIDER_STACKS for cap in CAPACITIES
    }


@pytest.mark.e2e
@pytest.mark.parametrize("name", sorted(CASES))
def test_the_local_nodes_carry_the_real_stacks_labels_taints_and_gpus(
    emulated: dict[str, Shapes], name: str
) -> None:
    assert problems(name, real(CASES[name]), emulated[name]) == []


@pytest.mark.e2e
def test_each_node_input_is_what_the_tier_reads(emulated: dict[str, Shapes]) -> None:
    """devtools/cluster/tier.py registers each node from ``input``: its name, labels (strings),
    taints ({key, value, effect}, Kubernetes' effect names) and GPUs (a whole number)."""
    for name, shapes in emulated.items():
        assert len(shapes.inputs) == NODES, name
        for i, n in enumerate(shapes.inputs):
            assert n["name"] == f"burst-{RUN}-node-{i}", name
            assert n["labels"] and all(isinstance(v, str) for v in n["labels"].values()), name
            assert n["taints"], name
            for t in n["taints"]:
                assert set(t) == {"key", "value", "effect"}, (name, t)
                assert t["effect"] in ("NoSchedule", "PreferNoSchedule", "NoExecute"), (name, t)
            assert isinstance(n["gpus"], int) and n["gpus"] >= 1, (name, n.get("gpus"))


@pytest.mark.e2e
def test_the_comparison_sees_a_wrong_label_taint_gpu_count_or_selector(
    emulated: dict[str, Shapes],
) -> None:
    """Each way the emulation was wrong before (labels other than the provider's, no taints,
    no GPUs, AWS's selector without the region) is a problem the comparison reports."""

    def broken(name: str, change: Callable[[Shapes], None]) -> list[str]:
        got = copy.deepcopy(emulated[name])
        change(got)
        return problems(name, real(CASES[name]), got)

    def old_region_label(s: Shapes) -> None:
        for n in s.nodes:
            n["labels"]["topology/region"] = n["labels"].pop("topology.kubernetes.io/region")

    def no_taints(s: Shapes) -> None:
        for n in s.nodes:
            n["taints"] = []

    def no_gpus(s: Shapes) -> None:
        s.gpus = [None] * len(s.gpus)

    def old_selector(s: Shapes) -> None:
        s.selector = {k: s.selector[k] for k in ("accelerator", "burst/run-id")}

    def no_floor(s: Shapes) -> None:
        s.nodes = [copy.deepcopy(s.nodes[0]) for _ in s.nodes]

    assert any("topology/region" in p for p in broken("aws/spot", old_region_label))
    assert any("topology/region" in p for p in broken("azure/on_demand", old_region_label))
    assert any("real node(s) not emulated" in p for p in broken("gcp/spot", no_taints))
    assert any("gpus" in p for p in broken("nebius/spot", no_gpus))
    assert any("node_selector" in p for p in broken("aws/on_demand", old_selector))
    assert any("on_demand" in p for p in broken("aws/spot_with_floor", no_floor))


def test_the_hybrid_stacks_label_their_nodes_with_their_region() -> None:
    """walk-kueue S9: a hybrid node has no cloud provider to label its region, so the stack
    does (NodeRestriction lets a kubelet set topology.kubernetes.io/region on itself); the
    pods' selector names it too, so Kueue flavors of one GPU and capacity on two sites differ."""
    for provider, region in sorted(REGIONS.items()):
        r = rented(provider, GPU, region, "spot")
        for g in r.groups:
            assert g.labels["topology.kubernetes.io/region"] == region, provider
        assert r.selector["topology.kubernetes.io/region"] == region, provider
