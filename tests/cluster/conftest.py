"""The engines tier's fixtures (``make test-cluster``): one tier for the session.

The tier (devtools/cluster/tier.py) is a real control plane built from the engines' Go
modules, Argo's controller and executor, Kueue, and the stand-in kubelet; it takes about a
minute to start once the engines are built (``python -m devtools.engines``). ``make test``
does not collect this directory (tests/conftest.py): only ``make test-cluster`` runs it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from burst.spec import load_spec
from burst.storage.loopback import LoopbackS3
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.images import missing_images
from devtools.cluster.kubelet import missing as kubelet_missing
from devtools.cluster.tier import REPO, Tier

SUBMITTER = ("ci-pipeline", ("burst:submitters",))  # the CI role, mapped to its group


def _kubelet() -> str:
    """Real kubelets where this machine can run them and `make images` built the images;
    else the stand-in, and the one line why (BURST_TIER_KUBELET=real|stand-in chooses)."""
    chosen = os.environ.get("BURST_TIER_KUBELET")
    if chosen:
        return chosen
    problem = kubelet_missing() or missing_images()
    if problem:
        print(f"engines tier: the stand-in kubelet runs the step pods: real nodes need {problem}")
        return "stand-in"
    return "real"


def _image_refs() -> dict[str, list[str]]:
    """The references the quickstart's pods name for each image: the template's steps image,
    and for train what verify-image hands it (the verified image's repository and digest, as
    burst/steps/verify_image.py computes it here). The real nodes hold the images `make images`
    built under those names, as a registry would serve them (docs/reference/engines-tier.md)."""
    from burst.supplychain.provenance import run_reference
    from burst.supplychain.trust import load_trust
    from burst.supplychain.verify import verify_image

    spec = load_spec(REPO / "examples" / "quickstart.yaml")
    verified = verify_image(
        spec.image.reference, spec.image.trusted_key, load_trust(), search=(REPO,)
    )
    template = yaml.safe_load((REPO / "deploy" / "argo" / "burst-train.yaml").read_text())
    (steps,) = [
        p["value"]
        for p in template["spec"]["arguments"]["parameters"]
        if p["name"] == "steps-image"
    ]
    return {"steps": [steps], "trainer": [run_reference(verified.ref)]}


KUBELET = _kubelet()


@pytest.fixture(scope="session")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackS3]:
    server = LoopbackS3(tmp_path_factory.mktemp("tier-s3") / "data").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def tier(tmp_path_factory: pytest.TempPathFactory, store: LoopbackS3) -> Iterator[Tier]:
    root = tmp_path_factory.mktemp("tier")
    # the pods' cloud credentials: what a pod identity webhook would give them (the
    # loopback store's, generated for this session), and nothing else that could leave the
    # machine: any other AWS endpoint is a closed loopback port (the discard port), no instance
    # metadata, and a runs root of the pod's own
    pod_env = {
        **store.client_env(),
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_EC2_METADATA_DISABLED": "true",
        "BURST_RUNS_ROOT": "/tmp/runs",
    }
    t = Tier(root, pod_env=pod_env, kubelet=KUBELET, images=_image_refs())
    with t:
        t.install_kyverno_crds()
        t.cp.kubectl("apply", "-k", str(REPO / "deploy"))
        # the shipped reaper schedule (every 5 minutes) would reap with the shipped defaults;
        # test_reaper.py runs it on purpose, with the tier's own cloud and server
        t.cp.kubectl(
            "patch", "cronworkflow", "burst-reaper", "-n", "burst", "--type=merge",
            "-p", '{"spec": {"suspend": true}}',
        )  # fmt: skip
        t.cp.kubectl("apply", "-k", str(REPO / "deploy" / "kueue"))
        yield t
    if os.environ.get("BURST_TIER_KEEP"):
        print(f"tier directory kept: {root}")


@pytest.fixture(scope="session")
def cp(tier: Tier) -> ControlPlane:
    return tier.cp


@pytest.fixture(scope="session")
def submitter(cp: ControlPlane) -> Path:
    user, groups = SUBMITTER
    return cp.kubeconfig(user, groups)
