"""Argo Workflows on the engines tier: its CRDs and RBAC from the module's own install
manifests (``manifests/cluster-install``, without the Deployments and Services: the
controller runs here as a process, with the token of the service account those manifests
make), burst's controller configuration (``deploy/controller``) merged in as a user applies
it, and the ``workflow-controller`` process."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster.controlplane import ControlPlane, Process, free_port
from devtools.engines import ARGO, module_source

log = logging.getLogger(__name__)

NAMESPACE = "argo"
CONTROLLER_ACCOUNT = "argo"  # manifests/base/workflow-controller/workflow-controller-sa.yaml
CAPTURE_FINALIZER = "ARGO_POD_STATUS_CAPTURE_FINALIZER"
#: the executor image the controller names in every pod (on real nodes: made from the
#: argoexec built here, devtools/cluster/ociimage.py)
EXECUTOR_IMAGE = f"quay.io/argoproj/argoexec:{ARGO}"
# Objects of the install that would be pods or their Services: the tier runs the controller
# as a process instead, and argo-server is not part of the tier (docs/reference/engines-tier.md).
_SKIPPED_KINDS = {"Deployment", "Service"}


def install_objects(cp: ControlPlane) -> list[dict[str, Any]]:
    src = (
        module_source(f"github.com/argoproj/argo-workflows/v4@{ARGO}")
        / "manifests"
        / "cluster-install"
    )
    text = cp.kubectl("kustomize", str(src)).stdout
    return [d for d in yaml.safe_load_all(text) if d and d.get("kind") not in _SKIPPED_KINDS]


def install(cp: ControlPlane, repo: Path) -> None:
    cp.kubectl("create", "namespace", NAMESPACE, check=False)
    objs = install_objects(cp)
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    cp.apply(crds)
    for crd in crds:
        cp.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s"
        )
    cp.apply([o for o in objs if o["kind"] != "CustomResourceDefinition"])
    # burst's controller configuration, applied as docs/cluster-setup.md step 4 says
    cp.kubectl("apply", "-k", str(repo / "deploy" / "controller"))
    # the tier's own: the controller's metrics server would listen on every interface at 9090
    cp.kubectl(
        "patch",
        "configmap",
        "workflow-controller-configmap",
        "-n",
        NAMESPACE,
        "--type=merge",
        "-p",
        '{"data": {"metricsConfig": "enabled: false\\n", "telemetryConfig": "enabled: false\\n"}}',
    )


def start_controller(cp: ControlPlane, argo_bin: Path) -> Process:
    token = cp.create_token(NAMESPACE, CONTROLLER_ACCOUNT)
    kubeconfig = cp.token_kubeconfig("argo-workflow-controller", token)
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["contexts"][0]["context"]["namespace"] = NAMESPACE  # the controller's own namespace
    kubeconfig.write_text(yaml.safe_dump(doc))
    return cp._spawn(
        "workflow-controller",
        [
            str(argo_bin / "workflow-controller"),
            f"--kubeconfig={kubeconfig}",
            f"--executor-image={EXECUTOR_IMAGE}",
            "--loglevel=info",
            "--workflow-workers=4",
            "--pod-cleanup-workers=2",
        ],
        env={
            # docs/cluster-setup.md step 3: without it, a pod the kubelet removes right after
            # its end (an eviction, a drain, a spot reclaim) is often gone before the
            # controller reads its exit code, and the node ends "pod deleted" (node loss, exit
            # -1) instead of the train step's 75 (found on the engines tier)
            CAPTURE_FINALIZER: "true",
            "LEADER_ELECTION_DISABLE": "true",
            "ARGO_METRICS_PORT": str(free_port()),
        },
    )


SERVER_ACCOUNT = "argo-server"  # manifests/base/argo-server/argo-server-sa.yaml


def start_server(
    cp: ControlPlane,
    argo_bin: Path,
    *,
    port: int | None = None,
    timeout: float = 90.0,
) -> tuple[Process, str]:
    """``argo server`` (the CLI binary, ``argo_bin``, or the folder holding it) as
    docs/cluster-setup.md step 3 runs it: ``--auth-mode=client`` (every call acts with the
    caller's own token), TLS with the certificate it generates for itself (self-signed: clients
    skip verification), the controller's namespace and ConfigMap, and the token of the
    ``argo-server`` service account Argo's install makes. Returns the process and its URL,
    ``https://127.0.0.1:PORT``, once it answers there.

    Argo v4.0.5's server has no bind-address flag: it listens on ``:PORT``
    (server/apiserver/argoserver.go Run), every interface. Only 127.0.0.1 is handed to clients;
    every API call still needs a token the API server accepts (client auth mode). Stop it with
    ``cp.processes.pop("argo-server").stop()`` (``cp.check_alive`` would report it otherwise)."""
    import ssl
    import urllib.error
    import urllib.request

    binary = argo_bin / "argo" if argo_bin.is_dir() else argo_bin
    port = port or free_port()
    token = cp.create_token(NAMESPACE, SERVER_ACCOUNT)
    kubeconfig = cp.token_kubeconfig("argo-server", token)
    doc = yaml.safe_load(kubeconfig.read_text())
    doc["contexts"][0]["context"]["namespace"] = NAMESPACE  # where it reads the ConfigMap
    kubeconfig.write_text(yaml.safe_dump(doc))
    proc = cp._spawn(
        "argo-server",
        [
            str(binary),
            "server",
            f"--kubeconfig={kubeconfig}",
            f"--namespace={NAMESPACE}",
            "--auth-mode=client",
            "--secure=true",
            f"--port={port}",
            "--loglevel=info",
        ],
        # client auth mode builds each caller's REST config from the default loading rules
        # (util/kubeconfig DefaultRestConfig: $KUBECONFIG or in-cluster), not from --kubeconfig:
        # without it every token is refused ("no configuration has been provided")
        env={"KUBECONFIG": str(kubeconfig)},
    )
    url = f"https://127.0.0.1:{port}"
    insecure = ssl.create_default_context()
    insecure.check_hostname = False
    insecure.verify_mode = ssl.CERT_NONE

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"{url}/", context=insecure, timeout=2) as r:
                return bool(r.status == 200)
        except (urllib.error.URLError, OSError):
            return False

    cp.wait_for(answers, f"argo server at {url}", timeout=timeout)
    return proc, url
