"""Kyverno on the engines tier: its policy CRDs from its Go module, nothing else. The
controller is not part of the tier: burst's ClusterPolicy is stored and schema-checked by the
API server, not enforced (docs/reference/engines-tier.md)."""

from __future__ import annotations

from devtools.cluster.controlplane import ControlPlane
from devtools.engines import module_source

VERSION = "v1.19.1"  # its CRDs only


def install_crds(cp: ControlPlane) -> None:
    src = module_source(f"github.com/kyverno/kyverno@{VERSION}") / "config" / "crds" / "kyverno"
    for f in sorted(src.glob("kyverno.io_*policies.yaml")):
        cp.kubectl("apply", "--server-side", "-f", str(f))
    cp.kubectl(
        "wait", "--for=condition=Established", "--timeout=60s",
        "crd/clusterpolicies.kyverno.io", "crd/policies.kyverno.io",
    )  # fmt: skip
