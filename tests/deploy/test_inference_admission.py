"""deploy/inference walked through KServe v0.20.0's source (docs/reference/walk-kserve.md): the
pods KServe would make from each InferenceService, and what the cluster does with them.

``kserve_pod`` is a model of KServe's pod build, not KServe (nothing of KServe runs here),
written after: the Triton ClusterServingRuntime ``config/runtimes/kserve-tritonserver.yaml`` (its
container, image from ``config/runtimes/kustomization.yaml``), the merge of runtime and
InferenceService (``pkg/controller/v1beta1/inferenceservice/utils/utils.go``
``MergeRuntimeContainers``: a strategic merge, args concatenated; ``MergePodSpec``), and the
storage-initializer that the pod webhook injects for a non-PVC, non-OCI ``storageUri``
(``pkg/webhook/admission/pod/storage_initializer_injector.go`` ``CommonStorageInitialization``
-> ``pkg/utils/storage.go`` ``CreateInitContainerWithConfig``: image, args, resources, no
securityContext). Each test fails on the artifacts as they were before the walk.
"""

from __future__ import annotations

import copy
import fnmatch
from pathlib import Path
from typing import Any

import yaml
from pss import violations

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "deploy" / "inference"

#: config/runtimes/kserve-tritonserver.yaml at v0.20.0 (image: config/runtimes/kustomization.yaml)
TRITON_RUNTIME_CONTAINER: dict[str, Any] = {
    "name": "kserve-container",
    "image": "nvcr.io/nvidia/tritonserver:23.05-py3",
    "args": [
        "tritonserver", "--model-store=/mnt/models", "--grpc-port=9000", "--http-port=8080",
        "--allow-grpc=true", "--allow-http=true",
    ],
    "securityContext": {
        "runAsUser": 1000, "allowPrivilegeEscalation": False, "privileged": False,
        "runAsNonRoot": True, "capabilities": {"drop": ["ALL"]},
    },
}  # fmt: skip
#: config/configmap/inferenceservice.yaml at v0.20.0, storageInitializer.image
STORAGE_INITIALIZER_IMAGE = "kserve/storage-initializer:latest"
#: tritonserver flags that do nothing in the runtime's image (Triton 23.05 = 2.34): auto-complete
#: is on by default since 2.24 (22.07), which soft-deprecated --strict-model-config, and it
#: never completes a PyTorch model's inputs and outputs (a config.pbtxt names them)
NO_OP_TRITON_FLAGS = ("--strict-model-config",)
#: Knative's feature flags a podspec's nodeSelector and tolerations need (config-features)
KNATIVE_FLAGS = {
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "tolerations": "kubernetes.podspec-tolerations",
}


def bundle() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((BUNDLE / "kustomization.yaml").read_text())
    return [yaml.safe_load((BUNDLE / n).read_text()) for n in kustomization["resources"]]


def services() -> list[dict[str, Any]]:
    return [o for o in bundle() if o["kind"] == "InferenceService"]


def namespace() -> dict[str, Any] | None:
    kustomization = yaml.safe_load((BUNDLE / "kustomization.yaml").read_text())
    found = [
        o
        for o in bundle()
        if o["kind"] == "Namespace" and o["metadata"]["name"] == kustomization["namespace"]
    ]
    return found[0] if found else None


def kserve_pod(isvc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec KServe makes for the predictor (a model, see the module's docstring)."""
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == "kserve-tritonserver"
    container = copy.deepcopy(TRITON_RUNTIME_CONTAINER)
    container["args"] = [*container["args"], *model.get("args", [])]
    for key in ("resources", "securityContext", "env", "image"):
        if key in model:
            container[key] = (
                {**container.get(key, {}), **model[key]}
                if isinstance(model[key], dict)
                else model[key]
            )
    pod: dict[str, Any] = {"containers": [container]}
    for key in ("nodeSelector", "tolerations", "securityContext", "serviceAccountName"):
        if key in predictor:
            pod[key] = copy.deepcopy(predictor[key])
    uri = model.get("storageUri", "")
    if uri and not uri.startswith(("pvc://", "oci://")):
        pod["initContainers"] = [
            {
                "name": "storage-initializer",
                "image": STORAGE_INITIALIZER_IMAGE,
                "args": [uri, "/mnt/models"],
            }
        ]
    pod["volumes"] = [{"name": "kserve-provision-location", "emptyDir": {}}]
    return pod


def test_the_bundle_creates_its_namespace() -> None:
    # kustomize sets metadata.namespace; it does not create the namespace
    assert namespace() is not None, "deploy/inference names a namespace it does not create"


def test_the_namespace_enforces_what_kserve_pods_can_meet() -> None:
    ns = namespace()
    assert ns is not None
    labels = ns["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "baseline"
    assert labels["pod-security.kubernetes.io/warn"] == "restricted"
    assert labels["pod-security.kubernetes.io/audit"] == "restricted"
    for isvc in services():
        broken = violations(kserve_pod(isvc))
        # baseline's controls (host namespaces, sysctls, privileged, ...) all hold
        assert not [v for v in broken if "privileged" in v or "host" in v or "sysctl" in v]
        # "restricted" fails only on the init container KServe injects, which no
        # InferenceService field reaches: the server container meets it
        assert broken and all(v.startswith("container storage-initializer:") for v in broken), (
            isvc["metadata"]["name"],
            broken,
        )


def trusted_patterns() -> list[str]:
    policy = yaml.safe_load((REPO / "deploy" / "kyverno" / "verify-images.yaml").read_text())
    (rule,) = [r for r in policy["spec"]["rules"] if r["name"] == "only-trusted-repositories"]
    (condition,) = rule["validate"]["foreach"][0]["deny"]["conditions"]["any"]
    return list(condition["value"])


def test_burst_kyverno_policy_is_not_applied_to_the_tiers() -> None:
    patterns = trusted_patterns()
    for isvc in services():
        pod = kserve_pod(isvc)
        images = [c["image"] for c in pod["containers"] + pod.get("initContainers", [])]
        refused = [i for i in images if not any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        # burst's policy would refuse the pod: Triton and the storage-initializer are in no
        # repository policies/keys/trust.yaml trusts
        assert refused == images
    ns = namespace()
    assert ns is not None
    assert "burst.dev/signed-images" not in ns["metadata"].get("labels", {})


def test_knative_only_fields_come_with_the_mode_and_its_flags() -> None:
    prerequisites = (BUNDLE / "kustomization.yaml").read_text() + (
        REPO / "docs" / "inference.md"
    ).read_text()
    for isvc in services():
        predictor = isvc["spec"]["predictor"]
        mode = isvc["metadata"].get("annotations", {}).get("serving.kserve.io/deploymentMode")
        # containerConcurrency and timeout are read only by the Knative reconciler
        # (reconcilers/knative/ksvc_reconciler.go); the install's default mode may be Standard
        if "containerConcurrency" in predictor or "timeout" in predictor:
            assert mode == "Knative", isvc["metadata"]["name"]
        if mode == "Knative":
            for field, flag in KNATIVE_FLAGS.items():
                if field in predictor:
                    assert flag in prerequisites, (isvc["metadata"]["name"], flag)


def test_the_server_gets_no_flag_it_ignores_or_repeats() -> None:
    for isvc in services():
        args = kserve_pod(isvc)["containers"][0]["args"]
        flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        # MergeRuntimeContainers appends the InferenceService's args to the runtime's
        assert len(flags) == len(set(flags)), (isvc["metadata"]["name"], flags)
        assert not [f for f in flags if f in NO_OP_TRITON_FLAGS], isvc["metadata"]["name"]
