"""deploy/inference as it was before the serving walk (last changed in f36d86e), kept as text
and never regenerated: each rule of test_inference_manifests.py and test_inference_admission.py
that found a defect must find it in this copy, so no rule passes for a reason the old bundle
shared. The rules are functions of a bundle; this module only feeds them the old one.
"""

from __future__ import annotations

from test_inference_admission import knative_flag_problems, network_policy_problems
from test_inference_manifests import (
    Bundle,
    bundle_from,
    credential_problems,
    mode_problems,
    storage_problems,
    visibility_problems,
)

#: deploy/inference/* at f36d86e
BEFORE: dict[str, str] = {
    "kustomization.yaml": """\
# Tiered inference at scale (docs/inference.md): one KServe InferenceService per tier, each
# pinned to the region the tier serves from, applied on its own: `kubectl apply -k
# deploy/inference` (KServe >= 0.15 with its Triton runtime, kserve-tritonserver, installed
# first, and Knative Serving with the feature flags kubernetes.podspec-nodeselector and
# kubernetes.podspec-tolerations enabled in its config-features ConfigMap: the services run in
# Knative mode and Knative's webhook refuses a nodeSelector or tolerations otherwise). The router (burst/inference/routing.py) is the gateway in front: it alone decides
# which tier a request may reach (deadlines, fallbacks and the legal preflight's residency).
# Validated offline (tests/deploy/test_inference_manifests.py) against KServe v0.20.0's
# InferenceService CRD schema (tests/data/kserve-v0.20.0-inferenceservice.schema.json), strictly.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: burst-inference
labels:
  - pairs:
      app.kubernetes.io/part-of: burst
      app.kubernetes.io/component: inference
    includeSelectors: false
resources:
  - namespace.yaml
  - distilled.yaml
  - heavy.yaml
""",
    "namespace.yaml": """\
# The tiers' namespace (the kustomization's `namespace:`; without it `kubectl apply -k
# deploy/inference` stops at "namespaces burst-inference not found").
# Pod Security: "baseline" enforced, "restricted" warned and audited. Not "restricted" enforced
# as in the runs' namespace: KServe v0.20.0 injects a storage-initializer init container with
# no securityContext (pkg/utils/storage.go CreateInitContainerWithConfig), which "restricted"
# refuses (allowPrivilegeEscalation, capabilities) and no InferenceService field can change.
# Not labelled burst.dev/signed-images=enforce: burst's Kyverno policy trusts only burst's own
# repositories, so it would refuse every pod here (Triton, storage-initializer, Knative's
# queue-proxy). docs/reference/walk-kserve.md.
apiVersion: v1
kind: Namespace
metadata:
  name: burst-inference
  labels:
    pod-security.kubernetes.io/enforce: baseline
    pod-security.kubernetes.io/enforce-version: latest
    pod-security.kubernetes.io/warn: restricted
    pod-security.kubernetes.io/warn-version: latest
    pod-security.kubernetes.io/audit: restricted
    pod-security.kubernetes.io/audit-version: latest
""",
    "distilled.yaml": """\
# The near-user tier: the int8 distilled student (`burst distill`, tier distilled-int8), on CPU
# nodes in the region the users' requests enter at. storageUri is a Triton model repository
# exported from the tier: distilled_int8/config.pbtxt (platform pytorch_libtorch, inputs and
# outputs named: Triton does not auto-complete a PyTorch model's configuration) and
# distilled_int8/1/model.pt (TorchScript), the model named as the router asks for it
# (/v2/models/distilled_int8/infer). The export is a site's step, not done by burst
# (docs/inference.md, "Engines"); RUN is the run's id.
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: burst-distilled
  labels:
    burst.io/tier: distilled
    burst.io/region: ap-southeast-1
  annotations:
    serving.kserve.io/deploymentMode: Knative    # see heavy.yaml
spec:
  predictor:
    securityContext:                             # see heavy.yaml
      runAsNonRoot: true
      seccompProfile:
        type: RuntimeDefault
    minReplicas: 2
    maxReplicas: 8
    containerConcurrency: 8          # = the policy's queue limit; Knative's is per pod, in flight
    timeout: 5
    nodeSelector:
      topology.kubernetes.io/region: ap-southeast-1
    model:
      modelFormat:
        name: pytorch
      runtime: kserve-tritonserver
      protocolVersion: v2
      storageUri: s3://burst-models/RUN/tiers/distilled-int8/triton
      resources:
        requests:
          cpu: "2"
          memory: 2Gi
        limits:
          cpu: "2"
          memory: 2Gi
""",
    "heavy.yaml": """\
# The heavy tier: the run's final checkpoint (`burst distill`, tier heavy) on GPU nodes in the
# GPU-rich region. Requests reach it only through the router, which never sends data the
# preflight keeps out of this region (docs/inference.md, "The law").
# storageUri: a Triton model repository as for distilled.yaml, the model named heavy.
apiVersion: serving.kserve.io/v1beta1
kind: InferenceService
metadata:
  name: burst-heavy
  labels:
    burst.io/tier: heavy
    burst.io/region: me-central-1
  annotations:
    # containerConcurrency and timeout are read only in Knative mode (KServe's
    # ksvc_reconciler.go); named, not left to the install's default (docs/reference/walk-kserve.md)
    serving.kserve.io/deploymentMode: Knative
spec:
  predictor:
    # with the Triton runtime's container context (runAsUser 1000, no escalation, drop ALL)
    # this makes the server container meet Pod Security "restricted"; KServe's injected
    # storage-initializer does not (deploy/inference/namespace.yaml)
    securityContext:
      runAsNonRoot: true
      seccompProfile:
        type: RuntimeDefault
    minReplicas: 1
    maxReplicas: 4
    containerConcurrency: 8
    timeout: 30
    nodeSelector:
      topology.kubernetes.io/region: me-central-1
    tolerations:
      - key: nvidia.com/gpu
        operator: Exists
        effect: NoSchedule
    model:
      modelFormat:
        name: pytorch
      runtime: kserve-tritonserver
      protocolVersion: v2
      storageUri: s3://burst-models/RUN/tiers/heavy/triton
      resources:
        requests:
          cpu: "4"
          memory: 16Gi
          nvidia.com/gpu: "1"
        limits:
          cpu: "4"
          memory: 16Gi
          nvidia.com/gpu: "1"
""",
}


def before() -> Bundle:
    return bundle_from(BEFORE)


def test_before_the_tiers_had_public_routes() -> None:
    # Knative's and KServe's visibility labels absent: a public route past the router
    problems = visibility_problems(before())
    assert len(problems) == 4 and all("a public route" in p for p in problems)


def test_before_kserve_0_15_ran_the_services_in_its_default_mode() -> None:
    # "KServe >= 0.15" and deploymentMode Knative, which 0.15's GetDeploymentMode ignores
    assert len(mode_problems(before())) == 2


def test_before_the_storage_uris_were_bare_key_prefixes() -> None:
    assert [p for p in storage_problems(before()) if "does not end with '/'" in p]


def test_before_the_tiers_ran_as_default_with_no_store_credentials() -> None:
    assert len(credential_problems(before())) == 2


def test_before_knative_refused_the_pod_security_context() -> None:
    # the old kustomization named the prerequisites (docs/inference.md repeated them)
    bundle = before()
    problems = knative_flag_problems(bundle, bundle.kustomization_text)
    assert problems == [
        "burst-distilled: pod field securityContext needs kubernetes.podspec-securitycontext, "
        "named nowhere",
        "burst-heavy: pod field securityContext needs kubernetes.podspec-securitycontext, "
        "named nowhere",
    ]


def test_before_every_pod_in_the_cluster_reached_the_tiers() -> None:
    problems = network_policy_problems(before())
    assert len(problems) == 8 and all("admits pods of" in p for p in problems)
