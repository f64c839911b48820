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

from burst.storage.loopback import LoopbackS3
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.tier import REPO, Tier

SUBMITTER = ("ci-pipeline", ("burst:submitters",))  # the CI role, mapped to its group


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
    # loopback store's, generated for this session)
    t = Tier(root, pod_env=store.client_env())
    with t:
        t.cp.kubectl("create", "namespace", "burst", check=False)
        t.install_kyverno_crds()
        t.cp.kubectl("apply", "-k", str(REPO / "deploy"))
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
