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

import json
import logging
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from devtools import engines
from devtools.cluster import argo, kueue, kyverno
from devtools.cluster.controlplane import ControlPlane, TierError
from devtools.cluster.nodeagent import NodeAgent, NodeShape

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
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


def node_groups(root: Path) -> dict[str, NodeShape]:
    """Every node the local stack's states under ``root`` hold, by name."""
    found: dict[str, NodeShape] = {}
    for state in root.glob("pods/*/volumes/*/*/terraform/terraform.tfstate"):
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


class Tier:
    def __init__(
        self,
        root: Path,
        *,
        with_kueue: bool = True,
        static_nodes: Sequence[NodeShape] = STABLE_NODES,
        pod_env: Mapping[str, str] | None = None,
    ) -> None:
        self.root = root
        self.with_kueue = with_kueue
        self.bin = engines.binaries()
        self.cp = ControlPlane(root, self.bin)
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
            static_nodes,
            path=f"{venv_bin}:{argo_dir}:{SYSTEM_PATH}",
            keep=keep,
            workdir=REPO,
            extra_env=pod_env,
        )
        self._stop = threading.Event()
        self._cloud: threading.Thread | None = None
        self.joined: set[str] = set()

    def start(self) -> None:
        self.cp.start()
        argo.install(self.cp, REPO)
        argo.start_controller(self.cp, self.bin["workflow-controller"].parent)
        if self.with_kueue:
            self.cp.kubectl("create", "namespace", "burst", check=False)
            kueue.install_and_start(self.cp, self.bin["kueue"], ["burst"])
        self.agent.start()
        self._cloud = threading.Thread(target=self._cloud_loop, name="tier-cloud", daemon=True)
        self._cloud.start()

    def stop(self) -> None:
        self._stop.set()
        self.agent.stop()
        self.cp.stop()

    def __enter__(self) -> Tier:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _cloud_loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                for name, shape in node_groups(self.root).items():
                    if name not in self.joined:
                        log.info(
                            "node %s joins (labels %s, taints %s)",
                            name,
                            dict(shape.labels),
                            list(shape.taints),
                        )
                        self.agent.add_node(shape)
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
        for meta, node in self.agent.history:
            if (meta.get("labels") or {}).get("workflows.argoproj.io/workflow") == workflow:
                shape = self.agent.nodes.get(node)
                out[node] = dict(shape.labels) if shape else {}
        return out

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
        for d in sorted(self.root.glob(f"pods/{namespace}_{workflow}*")):
            for logf in sorted(d.glob("containers/*/log.txt")):
                tail = logf.read_text(errors="replace").splitlines()[-15:]
                lines.append(f"--- {d.name}/{logf.parent.name}")
                lines.extend(tail)
        return "\n".join(lines)
