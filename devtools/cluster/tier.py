"""The engines tier, whole: the control plane, Argo's controller, Kueue, the stand-in kubelet
and the tier's "cloud", the thing that makes a run's rented nodes join the cluster.

    python -m devtools.cluster [--no-kueue] [--root DIR]    start it and wait (Ctrl-C ends it)

The cloud: burst's ``local`` Terraform stack (terraform/modules/local-nodegroup) stands for a
provider's GPU node group; each ``terraform_data.node`` it applies holds the node's name,
labels and taints. The tier reads every such state the run's pods wrote (the provision pod's
runs volume) and registers those nodes with the stand-in kubelet, shaped as the state says,
so the real scheduler binds the train pod to the node group the run rented, or leaves it
Pending when the shapes disagree. Nodes stay for the tier's life: with the local stack the
state is in the provision pod's own volume, so the teardown pod (another pod, another volume)
finds nothing to destroy, and the tier cannot observe a destroy (docs/reference/engines-tier.md).
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools import engines
from devtools.cluster import argo, kueue, kyverno, ociimage
from devtools.cluster.controlplane import ControlPlane, TierError
from devtools.cluster.images import LOCAL_IMAGES
from devtools.cluster.kubelet import (
    API_SERVICE_IP,
    PAUSE_IMAGE,
    STORE_SERVICE_IP,
    PodNetwork,
    RealNode,
    reap_stale,
)
from devtools.cluster.kubelet import missing as kubelet_missing
from devtools.cluster.nodeagent import NodeAgent, NodeShape
from devtools.cluster.seed import image_seed, seed_in_use

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
BUSYBOX = Path("/bin/busybox")
SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: The cluster's own nodes, where every step but train runs (an on-demand CPU node group, as
#: an EKS cluster's system nodes): no taints, nothing spot.
STABLE_NODES = (
    NodeShape(
        "stable-0",
        labels={
            "node.kubernetes.io/instance-type": "m7i.2xlarge",
            "eks.amazonaws.com/capacityType": "ON_DEMAND",
        },
        capacity={"cpu": "8", "memory": "32Gi", "pods": "110"},
    ),
)
GPU_NODE_CAPACITY = {"cpu": "96", "memory": "1280Gi", "pods": "110", "nvidia.com/gpu": "8"}


#: where a provision pod's runs volume keeps the local stack's state: the stand-in's pod
#: directories, a kubelet's (``pods/<uid>/volumes/kubernetes.io~empty-dir/<volume>``)
STATE_GLOBS = (
    "pods/*/volumes/*/*/terraform/terraform.tfstate",
    "pods/*/volumes/*/*/*/terraform/terraform.tfstate",
)


def node_groups(*roots: Path) -> dict[str, NodeShape]:
    """Every node the local stack's states under ``roots`` hold, by name."""
    found: dict[str, NodeShape] = {}
    states = [s for root in roots for pattern in STATE_GLOBS for s in root.glob(pattern)]
    for state in states:
        try:
            doc = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        for res in doc.get("resources") or []:
            if res.get("type") != "terraform_data" or res.get("name") != "node":
                continue
            for inst in res.get("instances") or []:
                inp = ((inst.get("attributes") or {}).get("input") or {}).get("value") or {}
                if not inp.get("name"):
                    continue
                capacity = dict(GPU_NODE_CAPACITY)
                if inp.get("gpus"):
                    capacity["nvidia.com/gpu"] = str(inp["gpus"])
                found[inp["name"]] = NodeShape(
                    inp["name"],
                    labels={str(k): str(v) for k, v in (inp.get("labels") or {}).items()},
                    taints=[
                        {k: str(v) for k, v in t.items() if v is not None}
                        for t in inp.get("taints") or []
                    ],
                    capacity=capacity,
                )
    return found


def pod_identity_policy(env: Mapping[str, str], namespace: str = "burst") -> list[dict[str, Any]]:
    """What a cloud's pod identity webhook does, as a MutatingAdmissionPolicy: every container
    of a pod created in ``namespace`` gets ``env`` (the tier's object store credentials and
    endpoints), merged by name."""
    entries = ", ".join(
        f"Object.spec.containers.env{{name: {json.dumps(k)}, value: {json.dumps(v)}}}"
        for k, v in sorted(env.items())
    )
    expression = (
        "Object{spec: Object.spec{containers: object.spec.containers.map(c, "
        f"Object.spec.containers{{name: c.name, env: [{entries}]}})}}}}"
    )
    name = "tier-pod-identity"
    return [
        {
            "apiVersion": "admissionregistration.k8s.io/v1beta1",
            "kind": "MutatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "reinvocationPolicy": "Never",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [""],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": ["pods"],
                        }
                    ]
                },
                "mutations": [
                    {
                        "patchType": "ApplyConfiguration",
                        "applyConfiguration": {"expression": expression},
                    }
                ],
            },
        },
        {
            "apiVersion": "admissionregistration.k8s.io/v1beta1",
            "kind": "MutatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
    ]


class Tier:
    """The tier. ``kubelet="real"``: the cluster's node and every node a run rents are real
    kubelets with containerd and runc (devtools/cluster/kubelet.py), the step pods run in the
    images ``make images`` built (``images``: local image -> the references pods name), in a
    pod network the tier makes; ``"stand-in"``: the stand-in kubelet (nodeagent.py). Either
    way the stand-in registers the node shapes a test adds itself (``agent.add_node``: nodes
    that only need to be scheduled to, as kwok's)."""

    def __init__(
        self,
        root: Path,
        *,
        with_kueue: bool = True,
        static_nodes: Sequence[NodeShape] = STABLE_NODES,
        pod_env: Mapping[str, str] | None = None,
        kubelet: str = "stand-in",
        images: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if kubelet not in ("stand-in", "real"):
            raise ValueError(f"kubelet must be 'stand-in' or 'real', not {kubelet!r}")
        self.root = root
        self.with_kueue = with_kueue
        self.mode = kubelet
        self.bin = engines.binaries()
        self.cp = ControlPlane(root, self.bin)
        self.static_nodes = list(static_nodes)
        self.images = {k: list(v) for k, v in (images or {}).items()}
        self.real_nodes: dict[str, RealNode] = {}
        self.net: PodNetwork | None = None
        self._image_tars: dict[str, Path] = {}
        self._seed: Path | None = None
        self._pod_env = dict(pod_env or {})
        self._services: dict[tuple[str, int], int] = {}
        if self.mode == "real":
            self._pod_env = self._route_to_services(self._pod_env)
        argo_dir = self.bin["argoexec"].parent
        venv_bin = Path(sys.executable).parent
        keep = [
            str(REPO),
            sys.prefix,
            sys.base_prefix,
            str(argo_dir),
            str(engines.CACHE.parent),  # ~/.cache/burst: the DeepSpeed op cache, images
        ]
        self.agent = NodeAgent(
            self.cp,
            root,
            static_nodes if self.mode == "stand-in" else (),
            path=f"{venv_bin}:{argo_dir}:{SYSTEM_PATH}",
            keep=keep,
            workdir=REPO,
            extra_env=pod_env,
        )
        self._stop = threading.Event()
        self._cloud: threading.Thread | None = None
        self.joined: set[str] = set()
        self._retry_at: dict[str, float] = {}
        self.cloud_errors: list[str] = []  # why a node could not join (describe() shows them)

    # -- the pods' environment ----------------------------------------------------------

    def pod_url(self, url: str) -> str:
        """Where a pod reaches a server of this machine's loopback (``http(s)://127.0.0.1:N``):
        on real nodes the pod network's service address, that port forwarded there (the
        only way out of the pod network); with the stand-in, the URL itself."""
        m = re.fullmatch(r"(https?://)127\.0\.0\.1:(\d+)(/.*)?", url)
        if self.mode != "real" or not m:
            return url
        port = int(m.group(2))
        self._services[(STORE_SERVICE_IP, port)] = port
        if self.net is not None:
            self.net.add(STORE_SERVICE_IP, port, port)
        return f"{m.group(1)}{STORE_SERVICE_IP}:{port}{m.group(3) or ''}"

    def _route_to_services(self, env: Mapping[str, str]) -> dict[str, str]:
        return {k: self.pod_url(v) for k, v in env.items()}

    def set_pod_env(self, **env: str | None) -> None:
        """Add (or, with None, remove) variables of every later pod's environment."""
        for k, v in env.items():
            if v is None:
                self._pod_env.pop(k, None)
                self.agent.extra_env.pop(k, None)
            else:
                self._pod_env[k] = self.pod_url(v)
                self.agent.extra_env[k] = v
        if self.mode == "real":
            self.cp.apply(pod_identity_policy(self._pod_env))

    @contextlib.contextmanager
    def pod_env(self, **env: str) -> Iterator[None]:
        before = {k: self._pod_env.get(k) for k in env}
        self.set_pod_env(**env)
        try:
            yield
        finally:
            self.set_pod_env(**before)

    # -- start and stop -----------------------------------------------------------------

    def start(self) -> None:
        if self.mode == "real":
            problem = kubelet_missing()
            if problem:
                raise TierError(f"real kubelets need {problem}")
            for left in reap_stale():
                log.info("removed what a killed tier left: %s", left)
        self.cp.start()
        argo.install(self.cp, REPO)
        argo.start_controller(self.cp, self.bin["workflow-controller"].parent)
        if self.with_kueue:
            self.cp.kubectl("create", "namespace", "burst", check=False)
            kueue.install_and_start(self.cp, self.bin["kueue"], ["burst"])
        self.agent.start()
        if self.mode == "real":
            self._services[(API_SERVICE_IP, 443)] = self.cp.api_port
            self.net = PodNetwork(self.root, self._services)
            self.net.start()
            self.cp.apply(pod_identity_policy(self._pod_env))
            self._seed = image_seed(
                self.cp, self.bin, {k: self.images.get(k, ()) for k in LOCAL_IMAGES},
                self.root / "logs",
            )  # fmt: skip
            for shape in self.static_nodes:
                self._start_real_node(shape)
        self._cloud = threading.Thread(target=self._cloud_loop, name="tier-cloud", daemon=True)
        self._cloud.start()

    def stop(self) -> None:
        self._stop.set()
        errors: list[str] = []
        for node in list(self.real_nodes.values()):
            errors += node.stop()
        if self.net is not None:
            self.net.stop()
        self.agent.stop()
        self.cp.stop()
        if errors:
            log.warning("tier cleanup: %s", "; ".join(errors))

    def __enter__(self) -> Tier:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- real nodes ---------------------------------------------------------------------

    def _image_tar(self, kind: str) -> Path:
        """The OCI archive of one small image the tier builds, which each real node imports
        (made once per tier); ``make images``' images come with the node's seed."""
        if kind in self._image_tars:
            return self._image_tars[kind]
        out = self.root / "images" / f"{kind}.tar"
        if kind == "pause":
            ociimage.busybox(out, PAUSE_IMAGE, BUSYBOX, ["/bin/busybox", "sleep", "2147483647"])
        else:
            ociimage.argoexec(out, argo.EXECUTOR_IMAGE, self.bin["argoexec"], self.bin["kubectl"])
        self._image_tars[kind] = out
        return out

    def _start_real_node(
        self, shape: NodeShape, extended: Mapping[str, str] | None = None
    ) -> RealNode:
        assert self.net is not None
        node = RealNode(
            self.cp, self.bin, shape.name, self.net, taints=shape.taints,
            log_dir=self.root / "logs",
        )  # fmt: skip
        self.real_nodes[shape.name] = node
        images: list[tuple[Path, str, Sequence[str]]] = [
            (self._image_tar("pause"), PAUSE_IMAGE, ()),
            (self._image_tar("argoexec"), argo.EXECUTOR_IMAGE, ()),
        ]
        assert self._seed is not None
        with seed_in_use():
            node.start(images, seed=self._seed)
        node.shape(shape.labels, extended or {})
        return node

    def _cloud_loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                roots = [self.root, *(n.kubelet_root for n in list(self.real_nodes.values()))]
                for name, shape in node_groups(*roots).items():
                    if name in self.joined or self._retry_at.get(name, 0) > time.monotonic():
                        continue
                    log.info(
                        "node %s joins (labels %s, taints %s)",
                        name,
                        dict(shape.labels),
                        list(shape.taints),
                    )
                    try:
                        if self.mode == "real":
                            # the node group's shape: its GPUs, and the CPU and memory of the
                            # instance (this machine has fewer; the kubelet reports its status
                            # hourly, so the node keeps what the cloud says)
                            self._start_real_node(shape, shape.capacity)
                        else:
                            self.agent.add_node(shape)
                    except (TierError, TimeoutError, OSError) as exc:
                        log.error("node %s could not join (retried in 30 s): %s", name, exc)
                        self.cloud_errors.append(f"{name}: {exc}")
                        failed = self.real_nodes.pop(name, None)
                        if failed is not None:
                            failed.stop()
                        self._retry_at[name] = time.monotonic() + 30
                        continue
                    self.joined.add(name)
            except Exception:  # the cloud must outlive one bad state
                log.exception("tier cloud")

    def install_kyverno_crds(self) -> None:
        kyverno.install_crds(self.cp)

    # -- helpers for tests and people ----------------------------------------------------

    def workflow(self, name: str, namespace: str = "burst") -> dict[str, Any]:
        out: dict[str, Any] = self.cp.get_json("workflow", name, "-n", namespace)
        return out

    def argo(self, *args: str, kubeconfig: Path | None = None, check: bool = True) -> str:
        """The argo CLI (built from its module) against the tier's API server."""
        cmd = [str(self.bin["argo"]), f"--kubeconfig={kubeconfig or self.cp.admin}", *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        if check and proc.returncode != 0:
            raise TierError(
                f"argo {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc.stdout

    def bound_nodes(self, workflow: str) -> dict[str, dict[str, str]]:
        """The nodes this workflow's pods ran on, with each node's labels."""
        out: dict[str, dict[str, str]] = {}
        if self.mode == "stand-in":
            for meta, node in self.agent.history:
                if (meta.get("labels") or {}).get("workflows.argoproj.io/workflow") == workflow:
                    shape = self.agent.nodes.get(node)
                    out[node] = dict(shape.labels) if shape else {}
            return out
        for n in ((self.workflow(workflow).get("status") or {}).get("nodes") or {}).values():
            host = n.get("hostNodeName")
            if n.get("type") == "Pod" and host and host not in out:
                got = self.cp.kubectl("get", "node", host, "-o", "json", check=False)
                labels = json.loads(got.stdout)["metadata"].get("labels", {}) if got.stdout else {}
                out[host] = dict(labels)
        return out

    def container_logs(self, pod_prefix: str, container: str = "main", ns: str = "burst") -> str:
        """The logs of one container of the pods whose names start with ``pod_prefix``."""
        if self.mode == "stand-in":
            pattern = f"pods/{ns}_{pod_prefix}*/containers/{container}/log.txt"
            paths = sorted(self.root.glob(pattern))
            return "\n".join(p.read_text(errors="replace") for p in paths)
        lines = []
        for node in list(self.real_nodes.values()):
            for p in sorted(node.pod_logs.glob(f"{ns}_{pod_prefix}*/{container}/*.log")):
                for ln in p.read_text(errors="replace").splitlines():
                    # the CRI log format: time, stream, P(artial)/F(ull), the line
                    parts = ln.split(" ", 3)
                    lines.append(parts[3] if len(parts) == 4 else ln)
        return "\n".join(lines)

    def describe(self, workflow: str, namespace: str = "burst") -> str:
        """What a person needs when a run on the tier went wrong: the workflow's nodes, its
        pods' phases and each container's last log lines."""
        lines = []
        try:
            wf = self.workflow(workflow, namespace)
            st = wf.get("status") or {}
            lines.append(f"workflow {workflow}: {st.get('phase')} {st.get('message', '')}")
            for n in sorted(
                (st.get("nodes") or {}).values(), key=lambda n: n.get("startedAt") or ""
            ):
                lines.append(
                    f"  {n.get('displayName')} [{n.get('type')}] {n.get('phase')} "
                    f"{n.get('message', '')}"
                )
        except TierError as exc:
            lines.append(str(exc))
        pods = self.cp.kubectl("get", "pods", "-n", namespace, "-o", "wide", check=False).stdout
        lines.append(pods)
        for container in ("init", "wait", "main"):
            text = self.container_logs(workflow, container, namespace)
            if text:
                lines.append(f"--- {container} containers of {workflow}")
                lines.extend(text.splitlines()[-25:])
        lines.extend(f"cloud: {e}" for e in self.cloud_errors)
        for node in self.real_nodes.values():
            lines.append(node.logs())
        return "\n".join(lines)
