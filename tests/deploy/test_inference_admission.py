"""deploy/inference walked through KServe v0.20.0's and Knative Serving v0.48.1's source
(docs/reference/walk-kserve.md): the pods KServe and Knative would make from each
InferenceService, and what the cluster does with them (Knative's webhook, Pod Security
admission, NetworkPolicy).

``kserve_pod`` is a model of the pod build, not KServe (nothing of KServe runs here), written
after: the Triton ClusterServingRuntime ``config/runtimes/kserve-tritonserver.yaml`` (its
container, image from ``config/runtimes/kustomization.yaml``), the merge of runtime and
InferenceService (``pkg/controller/v1beta1/inferenceservice/utils/utils.go``
``MergeRuntimeContainers``: a strategic merge, args concatenated; ``MergePodSpec``), Knative's
queue-proxy sidecar in Knative mode (``pkg/reconciler/revision/resources/queue.go``, its
``queueSecurityContext``), and the storage-initializer that KServe's pod webhook injects for a
non-PVC, non-OCI ``storageUri`` (``pkg/webhook/admission/pod/storage_initializer_injector.go``
``CommonStorageInitialization`` -> ``pkg/utils/storage.go`` ``CreateInitContainerWithConfig``:
image, args, resources, no securityContext). Each rule is a function of the bundle returning
its problems; test_inference_before.py shows each finds its defect in the bundle as it was.
"""

from __future__ import annotations

import copy
import fnmatch
from typing import Any

import yaml
from pss import SAFE_SYSCTLS, violations
from test_inference_manifests import KNATIVE_MODES, REPO, Bundle, mode, shipped

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
#: Knative's queue-proxy sidecar (pkg/reconciler/revision/resources/queue.go at
#: knative-v1.21.1: queueSecurityContext), added to every revision's pod in Knative mode
QUEUE_PROXY_CONTAINER: dict[str, Any] = {
    "name": "queue-proxy",
    "image": "gcr.io/knative-releases/knative.dev/serving/cmd/queue",
    "securityContext": {
        "allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True, "runAsNonRoot": True,
        "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
    },
}  # fmt: skip
#: config/configmap/inferenceservice.yaml at v0.20.0, storageInitializer.image
STORAGE_INITIALIZER_IMAGE = "kserve/storage-initializer:latest"
#: tritonserver flags that do nothing in the runtime's image (Triton 23.05 = 2.34): auto-complete
#: is on by default since 2.24 (22.07), which soft-deprecated --strict-model-config, and it
#: never completes a PyTorch model's inputs and outputs (a config.pbtxt names them)
NO_OP_TRITON_FLAGS = ("--strict-model-config",)
#: Knative's webhook (apis/serving/fieldmask.go PodSpecMask at knative-v1.21.1) keeps only
#: these pod fields with its default config-features; any other pod field is refused ("must
#: not set the field(s)") unless its feature flag is enabled. automountServiceAccountToken
#: only as false
KNATIVE_POD_FIELDS = {
    "serviceAccountName", "containers", "volumes", "imagePullSecrets", "enableServiceLinks",
    "automountServiceAccountToken",
}  # fmt: skip
#: the config-features flag each other pod field needs (apis/config/features.go; all
#: Disabled by default)
KNATIVE_FLAGS = {
    "affinity": "kubernetes.podspec-affinity",
    "topologySpreadConstraints": "kubernetes.podspec-topologyspreadconstraints",
    "hostAliases": "kubernetes.podspec-hostaliases",
    "nodeSelector": "kubernetes.podspec-nodeselector",
    "runtimeClassName": "kubernetes.podspec-runtimeclassname",
    "tolerations": "kubernetes.podspec-tolerations",
    "securityContext": "kubernetes.podspec-securitycontext",
    "shareProcessNamespace": "kubernetes.podspec-shareprocessnamespace",
    "priorityClassName": "kubernetes.podspec-priorityclassname",
    "schedulerName": "kubernetes.podspec-schedulername",
    "initContainers": "kubernetes.podspec-init-containers",
    "dnsPolicy": "kubernetes.podspec-dnspolicy",
    "dnsConfig": "kubernetes.podspec-dnsconfig",
}
#: the predictor's own fields that are KServe's, not the pod's (ComponentExtensionSpec and
#: the implementations): KServe reads them, Knative never sees them as pod fields
KSERVE_FIELDS = {
    "minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "scaleMetricType",
    "containerConcurrency", "timeout", "canaryTrafficPercent", "batcher", "logger", "labels",
    "annotations", "deploymentStrategy", "autoScaling", "model", "workerSpec", "storageUris",
    "storageContainerName",
}  # fmt: skip
#: pods a NetworkPolicy must let in (Knative's data plane: the activator and autoscaler in
#: knative-serving, the local gateway of Istio, KServe's default, or Kourier) and pods it must
#: keep out (any other namespace, and a bystander in the tiers' own namespace)
MUST_ADMIT = ("knative-serving", "istio-system")
MUST_REFUSE = ("default", "burst", "burst-inference", "kube-system")


def namespace(bundle: Bundle) -> dict[str, Any] | None:
    return bundle.named("Namespace", bundle.kustomization["namespace"])


def kserve_pod(isvc: dict[str, Any]) -> dict[str, Any]:
    """The pod spec KServe (and Knative) make for the predictor (a model, see the module's
    docstring)."""
    predictor = isvc["spec"]["predictor"]
    model = predictor["model"]
    assert model["runtime"] == "kserve-tritonserver"
    container = copy.deepcopy(TRITON_RUNTIME_CONTAINER)
    container["args"] = [*container["args"], *model.get("args", [])]
    for key in ("resources", "securityContext", "env", "image", "readinessProbe", "ports"):
        if key in model:
            container[key] = (
                {**container.get(key, {}), **model[key]}
                if isinstance(model[key], dict)
                else model[key]
            )
    pod: dict[str, Any] = {"containers": [container]}
    if mode(isvc) in KNATIVE_MODES:
        pod["containers"].append(copy.deepcopy(QUEUE_PROXY_CONTAINER))
    for key in set(predictor) - KSERVE_FIELDS:
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


# -- Knative's webhook ---------------------------------------------------------------------


def knative_flag_problems(bundle: Bundle, prerequisites: str) -> list[str]:
    """In Knative mode every pod field of the predictor is one Knative keeps by default, or
    its config-features flag is named among the prerequisites (the kustomization and
    docs/inference.md)."""
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        predictor = isvc["spec"]["predictor"]
        # containerConcurrency and timeout are read only by the Knative reconciler
        # (reconcilers/knative/ksvc_reconciler.go); the install's default mode may be Standard
        knative = mode(isvc) in KNATIVE_MODES
        if {"containerConcurrency", "timeout"} & set(predictor) and not knative:
            out.append(f"{name}: containerConcurrency/timeout outside Knative mode: unread")
        if not knative:
            continue
        for field in sorted(set(predictor) - KSERVE_FIELDS - KNATIVE_POD_FIELDS):
            flag = KNATIVE_FLAGS.get(field)
            if flag is None:
                out.append(f"{name}: pod field {field}: Knative refuses it")
            elif flag not in prerequisites:
                out.append(f"{name}: pod field {field} needs {flag}, named nowhere")
        if predictor.get("automountServiceAccountToken") is True:
            out.append(f"{name}: automountServiceAccountToken true: Knative refuses it")
    return out


def prerequisites(bundle: Bundle) -> str:
    return bundle.kustomization_text + (REPO / "docs" / "inference.md").read_text()


def test_knative_keeps_every_pod_field_the_services_set() -> None:
    bundle = shipped()
    assert knative_flag_problems(bundle, prerequisites(bundle)) == []


def test_a_pod_field_behind_a_flag_nobody_enables_fails() -> None:
    bundle = copy.deepcopy(shipped())
    bundle.services()[0]["spec"]["predictor"]["priorityClassName"] = "high"
    problems = knative_flag_problems(bundle, prerequisites(bundle))
    assert problems == [
        f"{bundle.services()[0]['metadata']['name']}: pod field priorityClassName needs "
        "kubernetes.podspec-priorityclassname, named nowhere"
    ]


# -- Pod Security admission ----------------------------------------------------------------


def pod_security_problems(bundle: Bundle) -> list[str]:
    """The namespace enforces ``baseline`` (the storage-initializer KServe injects has no
    securityContext, which no InferenceService field reaches: ``restricted`` would refuse
    every tier pod) and warns and audits ``restricted``; every container but the
    storage-initializer meets ``restricted``."""
    ns = namespace(bundle)
    if ns is None:
        return ["deploy/inference names a namespace it does not create"]
    labels = ns["metadata"].get("labels") or {}
    out = [
        f"{key}={labels.get(key)!r}, not {want!r}"
        for key, want in (
            ("pod-security.kubernetes.io/enforce", "baseline"),
            ("pod-security.kubernetes.io/warn", "restricted"),
            ("pod-security.kubernetes.io/audit", "restricted"),
        )
        if labels.get(key) != want
    ]
    for isvc in bundle.services():
        name, pod = isvc["metadata"]["name"], kserve_pod(isvc)
        out += [f"{name}: baseline: {v}" for v in baseline_violations(pod)]
        out += [
            f"{name}: {v}"
            for v in violations(pod)
            if not v.startswith("container storage-initializer:")
        ]
    return out


#: check_capabilities_baseline.go: what a container may add under "baseline"
BASELINE_CAPABILITIES = {
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
    "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
}  # fmt: skip


def baseline_violations(spec: dict[str, Any]) -> list[str]:
    """The controls of Pod Security ``baseline`` (kubernetes/pod-security-admission
    policy/check_*.go, the baseline level) a pod spec breaks; tests/deploy/pss.py has
    ``restricted``, which adds to these."""
    out = [f"{key} is true" for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key)]
    pod = spec.get("securityContext") or {}
    out += [
        f"volume {v.get('name')}: hostPath" for v in spec.get("volumes") or [] if "hostPath" in v
    ]
    if (pod.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile is Unconfined")
    out += [
        f"sysctl {s.get('name')}"
        for s in pod.get("sysctls") or []
        if s.get("name") not in SAFE_SYSCTLS
    ]
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        name, sc = c.get("name", "?"), c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append(f"container {name}: privileged")
        extra = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            out.append(f"container {name}: adds {sorted(extra)}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"container {name}: seccompProfile is Unconfined")
        if sc.get("procMount") not in (None, "Default"):
            out.append(f"container {name}: procMount {sc.get('procMount')}")
        out += [
            f"container {name}: hostPort {p['hostPort']}"
            for p in c.get("ports") or []
            if p.get("hostPort")
        ]
    return out


def test_the_namespace_enforces_what_kserve_pods_can_meet() -> None:
    bundle = shipped()
    assert pod_security_problems(bundle) == []
    for isvc in bundle.services():
        # "restricted" fails on the injected init container, and on it alone
        assert [v for v in violations(kserve_pod(isvc)) if "storage-initializer" in v]


def test_an_injected_istio_init_breaks_baseline() -> None:
    # Istio's sidecar injection without its CNI adds istio-init, which needs NET_ADMIN and
    # NET_RAW: "baseline" refuses the pod (docs/reference/walk-kserve.md, left alone)
    pod = kserve_pod(shipped().services()[0])
    pod["initContainers"].append(
        {
            "name": "istio-init",
            "securityContext": {"capabilities": {"add": ["NET_ADMIN", "NET_RAW"]}},
        }
    )
    assert baseline_violations(pod) == ["container istio-init: adds ['NET_ADMIN', 'NET_RAW']"]


# -- NetworkPolicy: only Knative's data plane reaches the tiers ----------------------------


def selects(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """A LabelSelector (matchLabels, matchExpressions) against labels; {} selects all."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr["key"], expr["operator"], expr.get("values") or []
        ok = {
            "In": key in labels and labels[key] in values,
            "NotIn": key not in labels or labels[key] not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def admits(bundle: Bundle, pod_labels: dict[str, str], source_ns: str) -> bool:
    """Whether a pod (labels: ``pod_labels``) in the bundle's namespace admits a connection
    from a pod with no labels in ``source_ns`` (networking.k8s.io/v1 semantics: a pod selected
    by an Ingress policy admits only what some such policy's rule allows; an ipBlock may
    hold pod addresses and is taken to admit)."""
    policies = [
        p
        for p in bundle.of_kind("NetworkPolicy")
        if "Ingress" in (p["spec"].get("policyTypes") or ["Ingress"])
        and selects(p["spec"].get("podSelector"), pod_labels)
    ]
    if not policies:
        return True
    own = bundle.kustomization["namespace"]
    ns_labels = {"kubernetes.io/metadata.name": source_ns}
    for p in policies:
        for rule in p["spec"].get("ingress") or []:
            peers = rule.get("from")
            if not peers:
                return True  # a rule without `from` admits every source
            for peer in peers:
                if "ipBlock" in peer:
                    return True
                ns_sel, pod_sel = peer.get("namespaceSelector"), peer.get("podSelector")
                ns_ok = selects(ns_sel, ns_labels) if ns_sel is not None else source_ns == own
                pod_ok = selects(pod_sel, {}) if pod_sel is not None else True
                if ns_ok and pod_ok:
                    return True
    return False


def tier_pod_labels(isvc: dict[str, Any]) -> dict[str, str]:
    """The labels KServe puts on a predictor's pods: the InferenceService's (and the
    kustomization's), its name and component (components/predictor.go buildObjectMeta:
    InferenceServicePodLabelKey, KServiceComponentLabel)."""
    return {
        **(isvc["metadata"].get("labels") or {}),
        "serving.kserve.io/inferenceservice": isvc["metadata"]["name"],
        "component": "predictor",
    }


def network_policy_problems(bundle: Bundle) -> list[str]:
    out = []
    for isvc in bundle.services():
        name, labels = isvc["metadata"]["name"], tier_pod_labels(isvc)
        out += [f"{name}: admits pods of {ns}" for ns in MUST_REFUSE if admits(bundle, labels, ns)]
        out += [f"{name}: refuses {ns}" for ns in MUST_ADMIT if not admits(bundle, labels, ns)]
    return out


def test_only_knatives_data_plane_reaches_the_tiers() -> None:
    assert network_policy_problems(shipped()) == []


def test_a_policy_open_to_the_namespace_or_an_address_block_fails() -> None:
    bundle = copy.deepcopy(shipped())
    (policy,) = bundle.of_kind("NetworkPolicy")
    policy["spec"]["ingress"].append({"from": [{"podSelector": {}}]})
    assert network_policy_problems(bundle) == [
        f"{s['metadata']['name']}: admits pods of burst-inference" for s in bundle.services()
    ]
    policy["spec"]["ingress"] = [{"from": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]
    assert len(network_policy_problems(bundle)) == 2 * len(MUST_REFUSE)


# -- the rest of the bundle ----------------------------------------------------------------


def test_the_bundle_creates_its_namespace() -> None:
    # kustomize sets metadata.namespace; it does not create the namespace
    assert namespace(shipped()) is not None, "deploy/inference names a namespace it does not create"


def trusted_patterns() -> list[str]:
    policy = yaml.safe_load((REPO / "deploy" / "kyverno" / "verify-images.yaml").read_text())
    (rule,) = [r for r in policy["spec"]["rules"] if r["name"] == "only-trusted-repositories"]
    (condition,) = rule["validate"]["foreach"][0]["deny"]["conditions"]["any"]
    return list(condition["value"])


def test_burst_kyverno_policy_is_not_applied_to_the_tiers() -> None:
    patterns = trusted_patterns()
    bundle = shipped()
    for isvc in bundle.services():
        pod = kserve_pod(isvc)
        images = [c["image"] for c in pod["containers"] + pod.get("initContainers", [])]
        refused = [i for i in images if not any(fnmatch.fnmatchcase(i, p) for p in patterns)]
        # burst's policy would refuse the pod: Triton, queue-proxy and the storage-initializer
        # are in no repository policies/keys/trust.yaml trusts
        assert refused == images
    ns = namespace(bundle)
    assert ns is not None
    assert "burst.dev/signed-images" not in ns["metadata"].get("labels", {})


def test_the_server_gets_no_flag_it_ignores_or_repeats() -> None:
    for isvc in shipped().services():
        args = kserve_pod(isvc)["containers"][0]["args"]
        flags = [a.split("=", 1)[0] for a in args if a.startswith("--")]
        # MergeRuntimeContainers appends the InferenceService's args to the runtime's
        assert len(flags) == len(set(flags)), (isvc["metadata"]["name"], flags)
        assert not [f for f in flags if f in NO_OP_TRITON_FLAGS], isvc["metadata"]["name"]
