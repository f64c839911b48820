"""docs/cluster-setup.md, followed offline: every `kubectl apply -k DIR` it names is a
kustomization here that renders and validates (Kubernetes 1.33 strict schemas), in the
namespace the page says; the namespace, group and server the page names are the ones the
artifacts use; every artifact of deploy/ is installed by some step of the page."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import yaml

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "cluster-setup.md"
K8S = "1.33.0"


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def test_every_applied_kustomization_renders_and_validates() -> None:
    dirs = re.findall(r"kubectl apply -k (\S+)", _text())
    assert dirs == [
        "deploy/controller",
        "deploy/device-plugin",
        "deploy/volcano",
        "deploy/",
        "deploy/kueue",
        "deploy/inference",
    ]
    for d in dirs:
        k = yaml.safe_load((REPO / d / "kustomization.yaml").read_text())
        for rel in k["resources"]:
            for obj in yaml.safe_load_all((REPO / d / rel).read_text()):
                if not obj or obj["apiVersion"].startswith(
                    (
                        "argoproj.io",
                        "kyverno.io",
                        "scheduling.volcano.sh",
                        "kueue.x-k8s.io",
                        "serving.kserve.io",
                    )
                ):
                    # CRDs: test_deploy_bundle.py, test_scheduling.py, test_kueue.py,
                    # test_inference_manifests.py
                    continue
                obj.setdefault("metadata", {})
                if obj["kind"] != "Namespace" and "namespace" in k:
                    obj["metadata"]["namespace"] = k["namespace"]
                kubernetes_validate.validate(obj, K8S, strict=True)


def test_the_namespaces_group_and_server_are_the_artifacts() -> None:
    text = _text()
    runs_ns = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())["namespace"]
    argo_ns = yaml.safe_load((REPO / "deploy" / "controller" / "kustomization.yaml").read_text())[
        "namespace"
    ]
    assert f"ARGO_NAMESPACE={runs_ns}" in text
    assert f"kubectl create namespace {argo_ns}" in text
    rbac = [d for d in yaml.safe_load_all((REPO / "deploy" / "rbac.yaml").read_text()) if d]
    groups = {
        s["name"]
        for d in rbac
        if d["kind"] == "RoleBinding"
        for s in d["subjects"]
        if s["kind"] == "Group"
    }
    assert groups and all(f"--kubernetes-groups {g}" in text for g in groups)
    from burst.pipelines.burst_reaper import ARGO_SERVER

    assert ARGO_SERVER in text  # the reaper's default server is the one step 3 installs
    assert f"{argo_ns}.svc" in ARGO_SERVER


def test_every_deploy_directory_is_installed_by_a_step() -> None:
    text = _text()
    for k in sorted((REPO / "deploy").rglob("kustomization.yaml")):
        rel = k.parent.relative_to(REPO).as_posix()
        assert f"kubectl apply -k {rel}" in text or f"kubectl apply -k {rel}/" in text, rel
