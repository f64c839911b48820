"""docs/cluster-setup.md's bundles on the real API server: what `kubectl apply` stores is what
the kustomizations render, admission included (Pod Security labels, webhooks, CRD schemas)."""

from __future__ import annotations

import pytest
import yaml

from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.tier import REPO

pytestmark = pytest.mark.cluster


def rendered(cp: ControlPlane, path: str) -> list[dict]:
    text = cp.kubectl("kustomize", str(REPO / path)).stdout
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.mark.parametrize("bundle", ["deploy", "deploy/kueue", "deploy/controller"])
def test_every_object_of_the_bundle_is_stored(cp: ControlPlane, bundle: str) -> None:
    # the session fixture applied deploy/ and deploy/kueue; deploy/controller came with Argo
    for obj in rendered(cp, bundle):
        ns = obj["metadata"].get("namespace")
        args = [
            "get",
            f"{obj['kind']}.{obj['apiVersion'].split('/')[0]}"
            if "/" in obj["apiVersion"]
            else obj["kind"],
            obj["metadata"]["name"],
        ]
        if ns:
            args += ["-n", ns]
        got = cp.kubectl(*args, "-o", "name", check=False)
        assert got.returncode == 0, (
            f"{bundle}: {obj['kind']} {obj['metadata']['name']}: {got.stderr.strip()}"
        )


@pytest.mark.parametrize("bundle", ["deploy/device-plugin"])
def test_bundles_not_run_here_pass_server_side_admission(cp: ControlPlane, bundle: str) -> None:
    """Bundles whose pods the tier does not run (the NVIDIA device plugin) still go through
    the real API server's validation and admission (dry run: nothing is stored)."""
    out = cp.kubectl("apply", "--dry-run=server", "-k", str(REPO / bundle), check=False)
    assert out.returncode == 0, out.stderr


def test_the_namespace_enforces_pod_security_restricted(cp: ControlPlane) -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "root-pod", "namespace": "burst"},
        "spec": {"containers": [{"name": "c", "image": "x", "command": ["true"]}]},
    }
    out = cp.kubectl("apply", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(bad), check=False)
    assert out.returncode != 0 and "violates PodSecurity" in out.stderr, out.stderr


def test_the_serving_tiers_pods_pass_the_inference_namespaces_pod_security(
    cp: ControlPlane,
) -> None:
    """deploy/inference's namespace enforces Pod Security `baseline`: the pods KServe and
    Knative would make for each tier (Triton, queue-proxy, the injected storage-initializer:
    tests/deploy/test_inference_admission.py models them from the sources) are admitted there by
    the real PodSecurity plugin (dry run), and the same pods are refused in `burst`
    (`restricted`). KServe's own stack is not part of the tier."""
    import sys

    sys.path.insert(0, str(REPO / "tests" / "deploy"))
    from test_inference_admission import kserve_pod
    from test_inference_manifests import shipped

    bundle = shipped()
    (ns_doc,) = bundle.of_kind("Namespace")
    cp.apply([ns_doc])
    namespace = ns_doc["metadata"]["name"]
    services = bundle.services()
    assert services
    for isvc in services:
        spec = kserve_pod(isvc)
        spec.pop("serviceAccountName", None)  # the account is the site's (its store's keys)
        for where, must_pass in ((namespace, True), ("burst", False)):
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"tier-{isvc['metadata']['name']}", "namespace": where},
                "spec": spec,
            }
            out = cp.kubectl(
                "create", "--dry-run=server", "-f", "-", stdin=yaml.safe_dump(pod), check=False
            )
            if must_pass:
                assert out.returncode == 0, (isvc["metadata"]["name"], out.stderr)
            else:
                assert "violates PodSecurity" in out.stderr, out.stderr
