"""deploy/kueue: every object validates strictly against Kueue's own v1beta2 CRD schemas
(tests/data/kueue-v1beta2-crds.schema.json, extracted from kubernetes-sigs/kueue's
config/components/crd/bases at the commit it names), plus the CEL rules of those CRDs that
these objects touch (jsonschema does not evaluate x-kubernetes-validations: they are written
out here); the objects agree with each other and with the teams and priorities burst knows;
the compiled templates label the pods that rent GPUs for Kueue's pod integration."""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from strict_schema import strict

from burst.admission.kueue_objects import CAPACITY_ORDER, NAMESPACE, local_queue_name
from burst.pipelines.common import KUEUE_PRIORITY_LABEL, KUEUE_QUEUE_LABEL
from burst.pipelines.gang import UNQUOTED
from burst.providers import PROVIDER_STACKS
from burst.spec import Priority

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO / "deploy" / "kueue"
SCHEMAS = REPO / "tests" / "data" / "kueue-v1beta2-crds.schema.json"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@functools.cache
def objects() -> list[dict[str, Any]]:
    k = yaml.safe_load((KUEUE / "kustomization.yaml").read_text())
    assert set(k) <= {"apiVersion", "kind", "labels", "resources"}
    out: list[dict[str, Any]] = []
    for rel in k["resources"]:
        out += [d for d in yaml.safe_load_all((KUEUE / rel).read_text()) if d]
    return out


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [o for o in objects() if o["kind"] == kind]


@functools.cache
def kueue_schema(kind: str) -> dict[str, Any]:
    doc = json.loads(SCHEMAS.read_text())
    return strict(doc["kinds"][kind]["schema"])  # type: ignore[no-any-return]


def schema_errors(obj: dict[str, Any]) -> list[str]:
    v = jsonschema.Draft7Validator(kueue_schema(obj["kind"]))
    return [f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in v.iter_errors(obj)]


def cel_errors(obj: dict[str, Any]) -> list[str]:
    """The CRDs' x-kubernetes-validations that apply to what these objects set."""
    out = []
    spec = obj.get("spec") or {}
    if obj["kind"] in ("ClusterQueue", "Cohort"):
        for rg in spec.get("resourceGroups") or []:
            for f in rg["flavors"]:
                names = [r["name"] for r in f["resources"]]
                if len(names) != len(rg["coveredResources"]):
                    out.append("flavors must have the same number of resources as coveredResources")
                if names != rg["coveredResources"]:  # Kueue's webhook: the same, in order
                    out.append(f"flavor {f['name']}: resources {names} != coveredResources")
                if not spec.get("cohortName") and any(
                    "borrowingLimit" in r for r in f["resources"]
                ):
                    out.append("borrowingLimit must be nil when cohort is empty")
    if obj["kind"] == "ClusterQueue":
        ff = spec.get("flavorFungibility") or {}
        if "preference" in ff and not (
            ff.get("whenCanBorrow") == ff.get("whenCanPreempt") == "TryNextFlavor"
        ):
            out.append("preference needs whenCanBorrow and whenCanPreempt TryNextFlavor")
        p = spec.get("preemption") or {}
        if (
            p.get("reclaimWithinCohort") == "Never"
            and (p.get("borrowWithinCohort") or {}).get("policy", "Never") != "Never"
        ):
            out.append("reclaimWithinCohort=Never and borrowWithinCohort.Policy!=Never")
    if obj["kind"] == "ResourceFlavor":
        for t in spec.get("tolerations") or []:
            if "key" not in t and t.get("operator") != "Exists":
                out.append("operator must be Exists when 'key' is empty")
            if t.get("operator") == "Exists" and "value" in t:
                out.append("a value must be empty when 'operator' is 'Exists'")
    return out


@pytest.mark.parametrize("obj", objects(), ids=lambda o: f"{o['kind']}/{o['metadata']['name']}")
def test_every_object_validates_strictly_against_kueues_crd(obj: dict[str, Any]) -> None:
    assert obj["apiVersion"] == "kueue.x-k8s.io/v1beta2"
    assert NAME.match(obj["metadata"]["name"])
    assert schema_errors(obj) == []
    assert cel_errors(obj) == []


def test_the_strict_schema_catches_a_typo_and_an_old_field() -> None:
    cq = json.loads(json.dumps(by_kind("ClusterQueue")[0]))  # a copy: objects() is cached
    cq["spec"]["cohort"] = "burst"  # v1beta1's name for cohortName
    assert any("cohort" in e for e in schema_errors(cq))
    cq = json.loads(json.dumps(by_kind("ClusterQueue")[0]))
    cq["spec"]["queueingStrategy"] = "FIFO"
    assert any("queueingStrategy" in e for e in schema_errors(cq))
    schemas = json.loads(SCHEMAS.read_text())
    assert all(k["served"] and k["storage"] for k in schemas["kinds"].values())


def test_the_objects_agree_with_each_other_and_with_burst() -> None:
    flavors = {o["metadata"]["name"]: o for o in by_kind("ResourceFlavor")}
    queues = {o["metadata"]["name"]: o for o in by_kind("ClusterQueue")}
    cohorts = {o["metadata"]["name"] for o in by_kind("Cohort")}
    teams = set(yaml.safe_load((REPO / "deploy" / "gpu-quota.yaml").read_text())["data"])
    assert set(queues) == teams  # one ClusterQueue per team of the GPU quota
    local = {o["metadata"]["name"]: o for o in by_kind("LocalQueue")}
    # a LocalQueue burst-<team> per team, whose ClusterQueue is the team's; none called
    # `default` (Kueue's LocalQueueDefaulting would put every unqueued pod of the namespace in it)
    assert set(local) == {f"burst-{t}" for t in teams} == {local_queue_name(t) for t in teams}
    assert "default" not in local
    assert all(local[f"burst-{t}"]["spec"]["clusterQueue"] == t for t in teams)
    assert all(q["metadata"]["namespace"] == "burst" for q in local.values())
    bands = {o["metadata"]["name"]: o["value"] for o in by_kind("WorkloadPriorityClass")}
    assert set(bands) == {f"burst-{p}" for p in Priority}
    values = [bands[f"burst-{p}"] for p in Priority]
    assert values == sorted(values) and len(set(values)) == len(values)
    for name, q in queues.items():
        assert q["spec"]["cohortName"] in cohorts
        for rg in q["spec"]["resourceGroups"]:
            assert "nvidia.com/gpu" in rg["coveredResources"]
            order = [f["name"] for f in rg["flavors"]]
            assert set(order) <= set(flavors), f"{name}: unknown flavors"
            caps = [flavors[f]["spec"]["nodeLabels"]["burst/capacity"] for f in order]
            ranks = [CAPACITY_ORDER.index(c) for c in caps]
            assert ranks == sorted(ranks), "spot flavors first, on-demand last"
    for f in flavors.values():
        labels = f["spec"]["nodeLabels"]
        assert {"accelerator", "burst/capacity"} <= set(labels)
        # every node carries its region (EKS node groups from the cloud, hybrid nodes from
        # their stack), hybrid nodes also eks.amazonaws.com/compute-type: hybrid
        # (tests/deploy/test_kueue_providers.py)
        assert "topology.kubernetes.io/region" in labels
        hybrid = labels.get("eks.amazonaws.com/compute-type") == "hybrid"
        assert hybrid == (PROVIDER_STACKS[f["metadata"]["labels"]["burst/provider"]] != "aws")
        assert labels["burst/capacity"] in CAPACITY_ORDER  # the nodes' values
        assert f["metadata"]["name"].endswith("-" + labels["burst/capacity"].replace("_", ""))


def _template(manifest: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in manifest["spec"]["templates"] if t["name"] == name)


#: What the compiled templates label a queued pod with: its team's LocalQueue, burst-<team>
#: (kueue_objects.local_queue_name), never the team alone (LocalQueueDefaulting: a LocalQueue
#: called `default`, the team default's, took in every pod of the namespace that names none).
QUEUE_LABEL_VALUE = "burst-{{workflow.parameters.team}}"


def _cluster_queue_of(label: str, team: str) -> str | None:
    """Kueue's queue lookup for a pod of a workflow of ``team`` in burst's namespace: Argo
    substitutes the team into the label; Kueue takes the LocalQueue of that name in the pod's
    namespace (the Workload's queueName) and admits in that LocalQueue's ClusterQueue. None:
    no such LocalQueue in deploy/kueue (the pod would stay gated)."""
    name = label.replace("{{workflow.parameters.team}}", team)
    local = [
        q
        for q in by_kind("LocalQueue")
        if q["metadata"]["namespace"] == NAMESPACE and q["metadata"]["name"] == name
    ]
    assert len(local) <= 1, name
    return local[0]["spec"]["clusterQueue"] if local else None


def _teams() -> set[str]:
    return set(yaml.safe_load((REPO / "deploy" / "gpu-quota.yaml").read_text())["data"])


def test_the_compiled_train_pods_carry_no_kueue_queue_label() -> None:
    """Quota first, then rent (issue 47): the run's own Workload, made by provision before it
    rents, holds the train pods' quota (burst/admission/kueue_workload.py); a queue label would
    have Kueue admit them a second time, against the quota their Workload holds."""
    train = yaml.safe_load((REPO / "deploy" / "argo" / "burst-train.yaml").read_text())
    labels = (_template(train, "train").get("metadata") or {}).get("labels") or {}
    assert KUEUE_QUEUE_LABEL not in labels and KUEUE_PRIORITY_LABEL not in labels
    params = {p["name"]: p.get("value") for p in train["spec"]["arguments"]["parameters"]}
    assert params["priority"] == "normal"
    regional = yaml.safe_load((REPO / "deploy" / "argo" / "burst-regional.yaml").read_text())
    worker = (_template(regional, "train").get("metadata") or {}).get("labels") or {}
    assert KUEUE_QUEUE_LABEL not in worker
    # each team's Workload names its LocalQueue, which admits it in the team's ClusterQueue
    for team in _teams():
        assert _cluster_queue_of(QUEUE_LABEL_VALUE, team) == team
    # the old label (the team alone) names no LocalQueue any more
    assert all(_cluster_queue_of("{{workflow.parameters.team}}", t) is None for t in _teams())
    # the pods that do not rent GPUs are not queued: they name no queue, and no LocalQueue is
    # called `default` for Kueue's LocalQueueDefaulting to put them in
    assert "metadata" not in _template(train, "teardown")
    assert _cluster_queue_of("default", "") is None


def test_gang_pods_carry_no_kueue_labels() -> None:
    train = yaml.safe_load((REPO / "deploy" / "argo" / "burst-train.yaml").read_text())
    text = _template(train, "train-gang")["resource"]["manifest"]
    for tag in UNQUOTED:  # what Argo substitutes before the manifest is YAML again
        text = text.replace(tag, "{}" if "selector" in tag else "[]" if "toler" in tag else "2")
    job = yaml.safe_load(text)
    for task in job["spec"]["tasks"]:
        meta = task["template"]["metadata"]
        # no queue label: the run's Workload holds the gang's quota (count = its nodes)
        assert not [k for k in meta["labels"] if k.startswith("kueue.x-k8s.io/")]
        assert "annotations" not in meta  # (the pod-group count: gone with the group label)


def test_submit_passes_the_spec_s_priority() -> None:
    from burst.runner.argo import spec_parameters
    from burst.spec import parse_spec

    text = (
        (REPO / "examples" / "quickstart.yaml")
        .read_text()
        .replace("priority: normal", "priority: high")
    )
    assert spec_parameters(parse_spec(text), text)["priority"] == "high"
