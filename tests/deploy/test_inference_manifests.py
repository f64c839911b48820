"""deploy/inference: one KServe InferenceService per tier, validated strictly against KServe
v0.20.0's InferenceService CRD schema (tests/data/kserve-v0.20.0-inferenceservice.schema.json:
the v1beta1 openAPIV3Schema of config/crd/full/serving.kserve.io_inferenceservices.yaml at tag
v0.20.0 of github.com/kserve/kserve, descriptions removed), consistent with the tiers
`burst serve` places (region, queue limit) and `burst distill` writes (the Triton model
repository), and checked field by field against what KServe and Knative do with it
(docs/reference/walk-kserve.md; KServe v0.20.0 = 1fb78105, Knative Serving v0.48.1 =
knative-v1.21.1, the one KServe v0.20.0's go.mod names).

Each rule is a function of the bundle returning its problems, one line each, so
test_inference_before.py can show that it finds its defect in the bundle as it was.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import jsonschema
import pytest
import yaml
from strict_schema import DATA, strict

from burst.inference.serve import DEFAULT_PLACEMENT
from burst.inference.triton_repo import INSTANCE_KIND, repository_key

REPO = Path(__file__).resolve().parents[2]
BUNDLE = REPO / "deploy" / "inference"


def schema() -> dict[str, Any]:
    doc = json.loads((DATA / "kserve-v0.20.0-inferenceservice.schema.json").read_text())
    doc.pop("$comment", None)
    return strict(doc)


SCHEMA = schema()


@dataclass(frozen=True)
class Bundle:
    """deploy/inference as kustomize reads it: the kustomization (and its text: its comments
    state the prerequisites) and the objects of its resources, in order."""

    kustomization_text: str
    objects: tuple[dict[str, Any], ...]

    @property
    def kustomization(self) -> dict[str, Any]:
        doc: dict[str, Any] = yaml.safe_load(self.kustomization_text)
        return doc

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects if o["kind"] == kind]

    def services(self) -> list[dict[str, Any]]:
        return self.of_kind("InferenceService")

    def named(self, kind: str, name: str) -> dict[str, Any] | None:
        found = [o for o in self.of_kind(kind) if o["metadata"]["name"] == name]
        return found[0] if found else None


def bundle_from(files: dict[str, str]) -> Bundle:
    """A bundle from its files' texts (``kustomization.yaml`` and its resources)."""
    text = files["kustomization.yaml"]
    names = yaml.safe_load(text)["resources"]
    return Bundle(text, tuple(yaml.safe_load(files[n]) for n in names))


def shipped() -> Bundle:
    names = yaml.safe_load((BUNDLE / "kustomization.yaml").read_text())["resources"]
    return bundle_from(
        {n: (BUNDLE / n).read_text() for n in ["kustomization.yaml", *names]},
    )


def services() -> dict[str, dict[str, Any]]:
    return {o["metadata"]["labels"]["burst.io/tier"]: o for o in shipped().services()}


def errors(obj: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(obj)]


def mode(isvc: dict[str, Any]) -> str | None:
    annotations = isvc["metadata"].get("annotations") or {}
    value = annotations.get("serving.kserve.io/deploymentMode")
    return str(value) if value is not None else None


def placement_of(isvc: dict[str, Any]) -> Any:
    kind = isvc["metadata"]["labels"]["burst.io/tier"]
    (p,) = [p for p in DEFAULT_PLACEMENT if p.kind == kind]
    return p


# -- visibility: no route around the router ----------------------------------------------

#: Knative's label (knative.dev/networking VisibilityLabelKey): on a Service it is copied to
#: its Route (pkg/reconciler/service/resources/route.go), which then gets only the cluster's
#: domain (pkg/reconciler/route/config/domain.go LookupDomainForLabels); KServe copies the
#: InferenceService's labels to the Knative Service (components/predictor.go buildObjectMeta,
#: reconcilers/knative/ksvc_reconciler.go) and reads this key itself for its VirtualService in
#: Knative mode (reconcilers/ingress/ingress_reconciler.go: isInternal, no external hosts)
KNATIVE_VISIBILITY = "networking.knative.dev/visibility"
#: KServe's own key (pkg/constants NetworkVisibility), read in Standard mode: no Ingress
#: (reconcilers/ingress/kube_ingress_reconciler.go) and no external HTTPRoute
#: (httproute_reconciler.go). Both are read from metadata.labels, not annotations
KSERVE_VISIBILITY = "networking.kserve.io/visibility"
CLUSTER_LOCAL = "cluster-local"


def visibility_problems(bundle: Bundle) -> list[str]:
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        labels = isvc["metadata"].get("labels") or {}
        annotations = isvc["metadata"].get("annotations") or {}
        for key in (KNATIVE_VISIBILITY, KSERVE_VISIBILITY):
            if labels.get(key) != CLUSTER_LOCAL:
                where = " (an annotation: KServe reads labels)" if key in annotations else ""
                out.append(f"{name}: label {key} is not {CLUSTER_LOCAL}: a public route{where}")
    return out


def test_no_tier_has_a_public_route() -> None:
    assert visibility_problems(shipped()) == []


def test_a_tier_labelled_for_one_mode_only_is_public_in_the_other() -> None:
    bundle = shipped()
    for key in (KNATIVE_VISIBILITY, KSERVE_VISIBILITY):
        broken = copy.deepcopy(bundle)
        del broken.services()[0]["metadata"]["labels"][key]
        assert [p for p in visibility_problems(broken) if key in p]


# -- deployment mode: the one the services are written for --------------------------------

#: the deploymentMode values KServe's controller takes from the annotation
#: (controller/v1beta1/inferenceservice/utils/utils.go GetDeploymentMode); any other value
#: silently falls back to the install's default mode (inferenceservice-config
#: deploy.defaultDeploymentMode), where a Standard install would create an Ingress
KSERVE_MODES: dict[tuple[int, int], frozenset[str]] = {
    (0, 15): frozenset({"Serverless", "RawDeployment", "ModelMesh"}),
    # v0.16.0 adds Knative and Standard, the old names kept (normalised to them)
    (0, 16): frozenset({"Serverless", "RawDeployment", "ModelMesh", "Knative", "Standard"}),
}
KNATIVE_MODES = {"Knative", "Serverless"}


def oldest_kserve(bundle: Bundle) -> tuple[int, int] | None:
    found = re.search(r"KServe >= (\d+)\.(\d+)", bundle.kustomization_text)
    return (int(found.group(1)), int(found.group(2))) if found else None


def known_modes(version: tuple[int, int]) -> frozenset[str]:
    return KSERVE_MODES[max(v for v in KSERVE_MODES if v <= version)]


def mode_problems(bundle: Bundle) -> list[str]:
    oldest = oldest_kserve(bundle)
    if oldest is None:
        return ["the kustomization names no oldest KServe (KServe >= X.Y)"]
    out = []
    for isvc in bundle.services():
        value = mode(isvc)
        if value not in known_modes(oldest):
            out.append(
                f"{isvc['metadata']['name']}: deploymentMode {value!r} is unknown to KServe "
                f"{oldest[0]}.{oldest[1]}, which then uses its install's default mode"
            )
    return out


def test_every_kserve_the_bundle_names_knows_the_services_mode() -> None:
    assert mode_problems(shipped()) == []
    assert oldest_kserve(shipped()) is not None


# -- storage: what the storage-initializer downloads ---------------------------------------


def storage_problems(bundle: Bundle) -> list[str]:
    """The storageUri is an s3:// prefix (burst's run stores are file:// or s3://; of the
    two, only s3:// is one KServe's default ClusterStorageContainer takes,
    config/storagecontainers/default.yaml, and kserve_storage.py downloads) that ends with
    a slash (``_download_s3`` lists ``Prefix=<path>``: without it ``triton-old/`` would be
    copied too) at the tier's Triton repository (burst.inference.triton_repo, written by
    ``burst distill``)."""
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        uri = isvc["spec"]["predictor"]["model"].get("storageUri", "")
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc:
            out.append(f"{name}: storageUri {uri!r} is not an s3:// bucket and prefix")
            continue
        if not uri.endswith("/"):
            out.append(f"{name}: storageUri {uri!r} does not end with '/': a bare key prefix")
        want = repository_key(placement_of(isvc).name)
        if not (parsed.path.lstrip("/") + ("" if uri.endswith("/") else "/")).endswith(want):
            out.append(f"{name}: storageUri {uri!r} is not the tier's repository .../{want}")
    return out


def test_every_storage_uri_is_a_repository_burst_writes_and_kserve_downloads() -> None:
    assert storage_problems(shipped()) == []


# -- runtime, model format and protocol ----------------------------------------------------

#: config/runtimes/kserve-tritonserver.yaml at v0.20.0 (the same formats and protocols in
#: v0.15 to v0.20): supportedModelFormats (name, version, autoSelect) and protocolVersions
TRITON_FORMATS = (
    ("tensorrt", "8", True), ("tensorflow", "1", True), ("tensorflow", "2", True),
    ("onnx", "1", True), ("pytorch", "1", False), ("triton", "2", True),
)  # fmt: skip
TRITON_PROTOCOLS = ("v2", "grpc-v2")
#: what the router speaks to a Triton tier: POST /v2/models/NAME/infer (serve.TritonTier)
ROUTER_PROTOCOL = "v2"


def supports(model: dict[str, Any]) -> bool:
    """KServe's ModelSpec.RuntimeSupportsModel (apis/serving/v1beta1/predictor_model.go): the
    model's ``mt:<name>[:<version>]`` label among the runtime's, which count every format
    when the runtime is named and only the autoSelect ones when it is not."""
    named = model.get("runtime") is not None
    labels = set()
    for fmt, version, auto in TRITON_FORMATS:
        if named or auto:
            labels |= {f"mt:{fmt}", f"mt:{fmt}:{version}"}
    want = model["modelFormat"]
    label = f"mt:{want['name']}" + (f":{want['version']}" if want.get("version") else "")
    return label in labels


def runtime_problems(bundle: Bundle) -> list[str]:
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        model = isvc["spec"]["predictor"]["model"]
        # the repository burst writes is Triton's (config.pbtxt, platform pytorch_libtorch)
        if model.get("runtime") != "kserve-tritonserver":
            out.append(f"{name}: runtime {model.get('runtime')!r}, not kserve-tritonserver")
        if not supports(model):
            out.append(f"{name}: Triton's runtime does not take {model['modelFormat']}")
        protocol = model.get("protocolVersion")
        if protocol not in TRITON_PROTOCOLS or protocol != ROUTER_PROTOCOL:
            out.append(f"{name}: protocolVersion {protocol!r}: the router speaks v2")
    return out


def test_every_tier_names_the_runtime_format_and_protocol_triton_serves() -> None:
    assert runtime_problems(shipped()) == []


def test_an_unselectable_format_without_its_runtime_is_refused() -> None:
    # pytorch is in the Triton runtime without autoSelect: named runtime or no runtime at all
    bundle = copy.deepcopy(shipped())
    del bundle.services()[0]["spec"]["predictor"]["model"]["runtime"]
    assert any("does not take" in p for p in runtime_problems(bundle))


# -- the store's credentials ---------------------------------------------------------------

#: pkg/credentials/service_account_credentials.go AwsIrsaAnnotationKey
IRSA = "eks.amazonaws.com/role-arn"


def credential_problems(bundle: Bundle) -> list[str]:
    """The storage-initializer gets the store's credentials only from the pod's service
    account (CreateSecretVolumeAndEnv; ``default`` when none is named): its ``secrets``
    (awsAccessKeyID / awsSecretAccessKey) or its IRSA annotation. Named in the predictor and
    created by the bundle."""
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        account = isvc["spec"]["predictor"].get("serviceAccountName")
        if not account or account == "default":
            out.append(f"{name}: no serviceAccountName: runs as 'default', which holds no keys")
            continue
        sa = bundle.named("ServiceAccount", account)
        if sa is None:
            out.append(f"{name}: service account {account} is not in the bundle")
        elif not sa.get("secrets") and IRSA not in (sa["metadata"].get("annotations") or {}):
            out.append(f"{name}: service account {account} names no secret and no IRSA role")
    return out


def test_every_tier_reads_the_store_with_credentials() -> None:
    assert credential_problems(shipped()) == []


# -- port and readiness --------------------------------------------------------------------

#: the Triton runtime's container args (config/runtimes/kserve-tritonserver.yaml)
TRITON_HTTP_PORT = 8080
#: Knative's user port when a container declares none (apis/serving/k8s_validation.go
#: validateContainersPorts): where queue-proxy sends requests and probes
KNATIVE_DEFAULT_PORT = 8080
#: Triton's KServe v2 readiness endpoint: 200 once the server and its models are ready
TRITON_READY = "/v2/health/ready"


def probe_problems(bundle: Bundle) -> list[str]:
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        model = isvc["spec"]["predictor"]["model"]
        ports = model.get("ports") or []
        user_port = ports[0]["containerPort"] if ports else KNATIVE_DEFAULT_PORT
        if user_port != TRITON_HTTP_PORT:
            out.append(f"{name}: Knative sends to port {user_port}, Triton's HTTP is on 8080")
        probe = model.get("readinessProbe")
        if probe is None:
            continue  # Knative's default: TCP on the user port
        get = probe.get("httpGet") or {}
        if get.get("path") != TRITON_READY or get.get("port", user_port) != user_port:
            out.append(f"{name}: readinessProbe is not GET {TRITON_READY} on port {user_port}")
        # apis/serving/k8s_validation.go validateReadinessProbe: periodSeconds 0 is
        # Knative's aggressive probe, and then these two are refused
        if not probe.get("periodSeconds") and {"failureThreshold", "timeoutSeconds"} & set(probe):
            out.append(f"{name}: failureThreshold/timeoutSeconds without periodSeconds")
    return out


def test_knative_sends_and_probes_where_triton_listens() -> None:
    assert probe_problems(shipped()) == []


def test_a_probe_or_port_beside_tritons_http_fails() -> None:
    bundle = copy.deepcopy(shipped())
    model = bundle.services()[0]["spec"]["predictor"]["model"]
    model["readinessProbe"] = {"httpGet": {"path": "/ready", "port": 8080}, "timeoutSeconds": 1}
    model["ports"] = [{"containerPort": 9000, "name": "h2c"}]
    assert len(probe_problems(bundle)) == 3


# -- GPUs: where each tier runs, in the manifests and in its Triton configuration ----------

#: the taint of burst's GPU node groups (terraform/modules/aws-gpu-nodegroup: taint
#: nvidia.com/gpu=present:NoSchedule), which the heavy tier must tolerate
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    """k8s.io/api core/v1 Toleration.ToleratesTaint."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        op = t.get("operator", "Equal")
        if op == "Exists" or (op == "Equal" and t.get("value", "") == taint["value"]):
            return True
    return False


def gpu_problems(bundle: Bundle) -> list[str]:
    out = []
    for isvc in bundle.services():
        name = isvc["metadata"]["name"]
        predictor = isvc["spec"]["predictor"]
        res = predictor["model"].get("resources") or {}
        req = (res.get("requests") or {}).get("nvidia.com/gpu")
        lim = (res.get("limits") or {}).get("nvidia.com/gpu")
        # the tier's Triton configuration places its instance (burst.inference.triton_repo)
        on_gpu = INSTANCE_KIND[placement_of(isvc).kind] == "KIND_GPU"
        if on_gpu and (not lim or req != lim):
            out.append(f"{name}: Triton runs it on a GPU, the pod asks none (requests == limits)")
        if not on_gpu and (req or lim):
            out.append(f"{name}: asks for a GPU its Triton configuration does not use")
        if on_gpu and not tolerates(predictor.get("tolerations") or [], GPU_TAINT):
            out.append(f"{name}: does not tolerate the GPU nodes' taint")
    return out


def test_each_tier_asks_for_the_device_its_triton_configuration_runs_on() -> None:
    assert gpu_problems(shipped()) == []


def test_a_heavy_tier_without_its_gpu_or_toleration_fails() -> None:
    bundle = copy.deepcopy(shipped())
    (heavy,) = [s for s in bundle.services() if placement_of(s).kind == "heavy"]
    del heavy["spec"]["predictor"]["tolerations"]
    del heavy["spec"]["predictor"]["model"]["resources"]["limits"]["nvidia.com/gpu"]
    assert len(gpu_problems(bundle)) == 2


# -- the schema and the placement ----------------------------------------------------------


def test_every_tier_validates_strictly() -> None:
    found = services()
    assert set(found) == {"distilled", "heavy"}
    for tier, obj in found.items():
        assert (
            obj["apiVersion"] == "serving.kserve.io/v1beta1" and obj["kind"] == "InferenceService"
        )
        assert errors(obj) == [], tier


def test_a_misspelt_field_fails() -> None:
    obj = copy.deepcopy(services()["heavy"])
    obj["spec"]["predictor"]["model"]["storageURI"] = obj["spec"]["predictor"]["model"].pop(
        "storageUri"
    )
    assert any("storageURI" in e for e in errors(obj))


@pytest.mark.parametrize("placement", DEFAULT_PLACEMENT, ids=lambda p: p.name)
def test_the_manifests_place_the_tiers_where_serve_does(placement: Any) -> None:
    obj = services()[placement.kind]
    predictor = obj["spec"]["predictor"]
    assert predictor["nodeSelector"]["topology.kubernetes.io/region"] == placement.region
    assert obj["metadata"]["labels"]["burst.io/region"] == placement.region
    assert predictor["containerConcurrency"] == placement.queue_limit
    assert predictor["model"]["storageUri"].endswith("/" + repository_key(placement.name))
    gpus = predictor["model"]["resources"]["limits"].get("nvidia.com/gpu")
    assert (gpus is not None) == (placement.kind == "heavy")
