"""A real node on its own, the cheapest check of what the tier's real nodes stand on
(devtools/cluster/kubelet.py; docs/reference/engines-tier.md, "Real nodes"): a kubelet v1.35.4
with containerd v2.4.2 and Debian's runc joins the tier's control plane as
``system:node:<name>``, tainted so that no other test's pod lands on it, and runs a pod in a
pod network of its own. From its own network namespace the pod reaches the API server at the
``kubernetes`` Service's cluster IP and nothing else: an outside address is unreachable.

The image is made here: Debian's static busybox (``imagePullPolicy: Never``). What this machine
lacks (root, runc, the CNI plugins, a static busybox) skips the test with one line naming it.
Everything it starts is stopped and what it made outside its directory removed, pass or fail.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Iterator
from pathlib import Path

import pytest

from devtools import engines
from devtools.cluster import ociimage
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.kubelet import (
    API_SERVICE_IP,
    PAUSE_IMAGE,
    PodNetwork,
    RealNode,
    missing,
    wait,
)

NODE = "real-0"
TAINT = {"key": "burst.dev/real-kubelet", "value": "true", "effect": "NoSchedule"}
NAMESPACE = "real-kubelet"
BUSYBOX = Path("/bin/busybox")
POD_IMAGE = "localhost/busybox:static"
OUTSIDE = "192.0.2.1"  # TEST-NET-1: never a real host; unreachable is the point


def _is_static(path: Path) -> bool:
    """An ELF executable with no program interpreter (PT_INTERP)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


@pytest.fixture
def real_node(cp: ControlPlane, tmp_path: Path) -> Iterator[RealNode]:
    lack = missing()
    if not lack and (not BUSYBOX.is_file() or not _is_static(BUSYBOX)):
        lack = f"a static {BUSYBOX} (Debian package busybox-static)"
    if lack:
        pytest.skip(f"a real kubelet needs {lack}")
    try:
        bins = engines.binaries(["kubernetes", "containerd"])
    except engines.BuildFailed as exc:
        pytest.skip(f"a real kubelet needs the kubelet and containerd built: {exc}")
    net = PodNetwork(tmp_path, {(API_SERVICE_IP, 443): cp.api_port})
    net.start()
    node = RealNode(cp, bins, NODE, net, taints=[TAINT])
    try:
        pause, pod = tmp_path / "pause.tar", tmp_path / "busybox.tar"
        ociimage.busybox(pause, PAUSE_IMAGE, BUSYBOX, ["/bin/busybox", "sleep", "2147483647"])
        ociimage.busybox(pod, POD_IMAGE, BUSYBOX, ["/bin/sh"])
        node.start([(pause, PAUSE_IMAGE, ()), (pod, POD_IMAGE, ())])
        yield node
    finally:
        errors = node.stop()
        net.stop()
        assert not errors, "cleanup: " + "; ".join(errors)


def test_a_real_kubelet_runs_a_pod_in_the_tiers_pod_network(
    cp: ControlPlane, real_node: RealNode
) -> None:
    node = real_node.node() or {}
    # registered as the node's own identity, with the taint that keeps other tests' pods off
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert TAINT in node["spec"].get("taints", [])
    assert node["status"]["nodeInfo"]["kubeletVersion"] == engines.KUBERNETES
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")

    script = (
        "echo service=$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT; "
        "nc -w 3 $KUBERNETES_SERVICE_HOST $KUBERNETES_SERVICE_PORT </dev/null "
        "&& echo api=reached || echo api=unreachable; "
        f"nc -w 3 {OUTSIDE} 80 </dev/null && echo outside=reached || echo outside=unreachable"
    )
    cp.kubectl("create", "namespace", NAMESPACE)
    try:
        cp.apply([{
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "net-check", "namespace": NAMESPACE},
            "spec": {
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "tolerations": [{**TAINT, "operator": "Equal"}],
                "containers": [{
                    "name": "c",
                    "image": POD_IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["/bin/sh", "-c", script],
                }],
            },
        }])  # fmt: skip

        def phase() -> str:
            got = cp.get_json("pod", "net-check", "-n", NAMESPACE)
            return str(got.get("status", {}).get("phase", ""))

        try:
            wait(lambda: phase() in ("Succeeded", "Failed"), "the pod to finish", 120, every=1)
        except TimeoutError:
            status = cp.get_json("pod", "net-check", "-n", NAMESPACE).get("status")
            pytest.fail(f"the pod did not finish: {status}\n{real_node.logs()}")
        got = cp.get_json("pod", "net-check", "-n", NAMESPACE)
        assert got["spec"]["nodeName"] == NODE
        assert got["status"]["phase"] == "Succeeded", (got["status"], real_node.logs())
        # its own network namespace on the tier's bridge, not the node's
        assert got["status"]["podIP"].startswith("10.244."), got["status"]
        logs = list(real_node.pod_logs.rglob("0.log"))
        text = "\n".join(p.read_text() for p in logs)
        assert f"service={API_SERVICE_IP}:443" in text, text
        assert "api=reached" in text, text
        assert "outside=unreachable" in text, text
    finally:
        cp.kubectl(
            "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false",
            "--grace-period=0", check=False,
        )  # fmt: skip
        # let the kubelet tear the pod down (sandbox, mounts) before it is stopped
        with contextlib.suppress(TimeoutError):
            wait(
                lambda: (
                    not cp.kubectl(
                        "get", "pods", "-n", NAMESPACE, "-o", "name", check=False, timeout=20
                    ).stdout.strip()
                ),
                "the pod's deletion",
                30,
            )
