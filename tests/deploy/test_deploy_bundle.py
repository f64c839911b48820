"""deploy/: the kustomize bundle renders offline and every object validates strictly.

Rendering: the kustomization's fields this bundle uses (resources, namespace, labels), as
kustomize applies them (a field outside that set fails the test, so nothing is silently left
out). Validation, with unknown fields refused: built-in kinds against Kubernetes 1.33's API
schemas (the kubernetes-validate package's strict schemas), the Argo kinds against Argo
Workflows v4.0.5's schema (tests/data), the Kyverno ClusterPolicy against Kyverno v1.19.0's
CRD schema (tests/data). Then what the pipeline needs of the cluster is checked to be there."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from manifests.checks import schema_errors
from strict_schema import kyverno_cluster_policy

from burst.supplychain.kyverno import render_yaml
from burst.supplychain.trust import load_trust

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S_VERSION = "1.33.0"
KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "namespace", "labels", "resources"}
CLUSTER_SCOPED = {"Namespace", "ClusterPolicy", "ClusterRole", "ClusterRoleBinding"}
ARGO_KINDS = {"WorkflowTemplate", "CronWorkflow", "Workflow"}


def render() -> list[dict[str, Any]]:
    k = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    assert set(k) <= KUSTOMIZATION_FIELDS, set(k) - KUSTOMIZATION_FIELDS
    assert k["kind"] == "Kustomization"
    objects: list[dict[str, Any]] = []
    for rel in k["resources"]:
        path = (DEPLOY / rel).resolve()
        assert DEPLOY in path.parents, f"{rel}: outside the kustomization root"
        objects += [d for d in yaml.safe_load_all(path.read_text()) if d]
    for obj in objects:
        meta = obj.setdefault("metadata", {})
        if obj["kind"] not in CLUSTER_SCOPED:
            meta["namespace"] = k["namespace"]
        for entry in k.get("labels") or []:
            meta.setdefault("labels", {}).update(entry["pairs"])
    return objects


def validation_errors(obj: dict[str, Any]) -> list[str]:
    kind = obj["kind"]
    if kind in ARGO_KINDS:
        return schema_errors(obj, "strict")
    if kind == "ClusterPolicy":
        v = jsonschema.Draft7Validator(kyverno_cluster_policy())
        return [f"{'/'.join(map(str, e.path))}: {e.message[:200]}" for e in v.iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return [f"{'/'.join(map(str, exc.path))}: {exc.message[:200]}"]
    return []


def by_kind(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def test_every_object_validates_strictly() -> None:
    objects = render()
    kinds = {o["kind"] for o in objects}
    assert kinds >= {
        "Namespace", "ServiceAccount", "Role", "RoleBinding", "ConfigMap",
        "WorkflowTemplate", "CronWorkflow", "ClusterPolicy",
    }  # fmt: skip
    for obj in objects:
        assert validation_errors(obj) == [], f"{obj['kind']} {obj['metadata']['name']}"


@pytest.mark.parametrize(
    ("kind", "breaker"),
    [
        ("ServiceAccount", lambda o: o.__setitem__("automountServiceAcountToken", True)),
        ("Role", lambda o: o["rules"][0].__setitem__("verb", ["get"])),
        ("WorkflowTemplate", lambda o: o["spec"].__setitem__("onexit", "x")),
        ("ClusterPolicy", lambda o: o["spec"].__setitem__("webhookTimeoutSecond", 30)),
    ],
)
def test_a_misspelt_field_fails(kind: str, breaker: Any) -> None:
    obj = copy.deepcopy(next(o for o in render() if o["kind"] == kind))
    breaker(obj)
    assert validation_errors(obj), kind


def test_the_generated_files_are_the_goldens() -> None:
    """Every compiled manifest is copied to deploy/argo (make goldens) and applied by the
    kustomization; nothing else is there."""
    compiled = sorted(p.name for p in (REPO / "burst" / "pipelines" / "compiled").glob("*.yaml"))
    assert {"burst-train.yaml", "burst-reaper.yaml", "burst-reaper-cron.yaml",
            "burst-regional.yaml"} <= set(compiled)  # fmt: skip
    assert sorted(p.name for p in (DEPLOY / "argo").glob("*.yaml")) == compiled
    kustomized = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    for name in compiled:
        assert (DEPLOY / "argo" / name).read_text() == (
            REPO / "burst" / "pipelines" / "compiled" / name
        ).read_text(), f"deploy/argo/{name} drifted: run `make goldens`"
        assert f"argo/{name}" in kustomized, f"deploy/kustomization.yaml does not apply {name}"
    trust = load_trust(REPO / "policies" / "keys")
    assert (DEPLOY / "kyverno" / "verify-images.yaml").read_text() == render_yaml(trust)


def check_needs(objects: list[dict[str, Any]]) -> None:
    (ns,) = by_kind(objects, "Namespace").values()
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert ns["metadata"]["labels"]["burst.dev/signed-images"] == "enforce"
    templates = by_kind(objects, "WorkflowTemplate")
    train = templates["burst-train"]
    # the reaper's CronWorkflow calls a WorkflowTemplate of the bundle, which names the account
    cron = by_kind(objects, "CronWorkflow")["burst-reaper"]
    reaper = templates[cron["spec"]["workflowSpec"]["workflowTemplateRef"]["name"]]
    sas = by_kind(objects, "ServiceAccount")
    for sa in (
        train["spec"]["serviceAccountName"],
        reaper["spec"]["serviceAccountName"],
    ):
        assert sa in sas, sa
        assert sas[sa]["metadata"]["annotations"]["eks.amazonaws.com/role-arn"].startswith(
            "arn:aws:iam::"
        )
    # the semaphore: the ConfigMap the template names, with the default team's key
    (sem,) = train["spec"]["synchronization"]["semaphores"]
    quota = by_kind(objects, "ConfigMap")[sem["configMapKeyRef"]["name"]]
    default_team = next(
        p["value"] for p in train["spec"]["arguments"]["parameters"] if p["name"] == "team"
    )
    assert int(quota["data"][default_team]) >= 1
    assert all(int(v) >= 1 for v in quota["data"].values())
    # RBAC: every workflow service account may report task results (Argo >= 3.4)
    roles = by_kind(objects, "Role")
    bound: dict[str, set[tuple[str, str]]] = {}
    for rb in by_kind(objects, "RoleBinding").values():
        role = roles[rb["roleRef"]["name"]]
        grants = {
            (r, v) for rule in role["rules"] for r in rule["resources"] for v in rule["verbs"]
        }
        for s in rb["subjects"]:
            if s["kind"] == "ServiceAccount":
                assert s["namespace"] == ns["metadata"]["name"]
            bound.setdefault(s["name"], set()).update(grants)
    for sa in sas:
        assert {("workflowtaskresults", "create"), ("workflowtaskresults", "patch")} <= bound[sa]
    assert ("jobs", "create") in bound["burst-run"]  # train-gang's Volcano Job
    # the artifact repository Argo reads by default
    repos = by_kind(objects, "ConfigMap")["artifact-repositories"]
    key = repos["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    repo = yaml.safe_load(repos["data"][key])
    assert repo["s3"]["useSDKCreds"] is True and "accessKeySecret" not in repo["s3"]


def test_what_the_pipeline_needs_of_the_cluster_is_there() -> None:
    check_needs(render())


def test_the_controller_configuration_validates_and_lives_with_argo() -> None:
    """deploy/controller is its own kustomization: the controller reads its ConfigMap in its
    own namespace (Argo's install: ``argo``), never the runs' namespace."""
    k = yaml.safe_load((DEPLOY / "controller" / "kustomization.yaml").read_text())
    assert (
        k["namespace"] != yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["namespace"]
    )
    for rel in k["resources"]:
        for obj in yaml.safe_load_all((DEPLOY / "controller" / rel).read_text()):
            obj["metadata"]["namespace"] = k["namespace"]
            assert validation_errors(obj) == []
            assert obj["metadata"]["name"] == "workflow-controller-configmap"


@pytest.mark.parametrize(
    "breaker",
    [
        lambda objs: by_kind(objs, "ConfigMap")["burst-gpu-quota"]["data"].pop("default"),
        lambda objs: by_kind(objs, "Role")["burst-executor"]["rules"][0]["verbs"].remove("patch"),
        lambda objs: objs.remove(by_kind(objs, "ServiceAccount")["burst-reaper"]),
        lambda objs: objs.remove(by_kind(objs, "WorkflowTemplate")["burst-reaper"]),
    ],
)
def test_the_needs_check_catches_a_missing_piece(breaker: Any) -> None:
    objects = render()
    breaker(objects)
    with pytest.raises((AssertionError, KeyError)):
        check_needs(objects)
