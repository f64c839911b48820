"""Kueue on the engines tier: its install from the module's own ``config/default`` (CRDs,
RBAC, webhook configurations), the controller as a process with the token of the service
account that install makes, and its webhooks served on loopback.

The install's webhook configurations (and any CRD conversion webhook) name the in-cluster
Service ``kueue-webhook-service``; the tier has no Services' network, so each clientConfig is
rewritten to the same path on ``https://127.0.0.1:<port>`` with the tier's CA, and the
controller serves them with a certificate for 127.0.0.1 (internal certificate management off).
Nothing else of the install changes."""

from __future__ import annotations

import base64
import copy
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster.controlplane import ControlPlane, Process, free_port
from devtools.engines import KUEUE, module_source

NAMESPACE = "kueue-system"
ACCOUNT = "kueue-controller-manager"
_SKIPPED_KINDS = {"Deployment", "Service", "Secret", "APIService"}
FRAMEWORKS = ("pod",)
METRICS_CERTS = "/etc/kueue/metrics/certs"


def _rewrite_client(cfg: dict[str, Any], url: str, ca: str) -> None:
    svc = cfg.pop("service", None)
    path = (svc or {}).get("path", "")
    cfg["url"] = url + path
    cfg["caBundle"] = ca


def install_objects(cp: ControlPlane, webhook_url: str) -> list[dict[str, Any]]:
    src = module_source(f"sigs.k8s.io/kueue@{KUEUE}") / "config" / "default"
    text = cp.kubectl("kustomize", str(src)).stdout
    ca = base64.b64encode((cp.pki / "ca.crt").read_bytes()).decode()
    out = []
    for doc in yaml.safe_load_all(text):
        if not doc or doc.get("kind") in _SKIPPED_KINDS:
            continue
        doc = copy.deepcopy(doc)
        if doc["kind"] in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
            for hook in doc.get("webhooks") or []:
                _rewrite_client(hook["clientConfig"], webhook_url, ca)
        if doc["kind"] == "CustomResourceDefinition":
            conv = (doc.get("spec") or {}).get("conversion") or {}
            wh = conv.get("webhook") or {}
            if wh.get("clientConfig"):
                _rewrite_client(wh["clientConfig"], webhook_url, ca)
        out.append(doc)
    return out


def install_and_start(cp: ControlPlane, kueue_bin: Path, managed_namespaces: list[str]) -> Process:
    assert cp.ca is not None
    port = free_port()
    url = f"https://127.0.0.1:{port}"
    objs = install_objects(cp, url)
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    cp.apply([o for o in objs if o["kind"] == "Namespace"])
    cp.apply(crds)
    for crd in crds:
        cp.kubectl(
            "wait", "--for=condition=Established", f"crd/{crd['metadata']['name']}", "--timeout=60s"
        )
    rest = [o for o in objs if o["kind"] not in ("CustomResourceDefinition", "Namespace")]
    # the webhooks must be served before they are registered: objects first, webhooks last
    hooks = [o for o in rest if o["kind"].endswith("WebhookConfiguration")]
    cp.apply([o for o in rest if o not in hooks])

    certs = cp.root / "kueue-certs"
    certs.mkdir(parents=True, exist_ok=True)
    pair = cp.ca.issue("kueue-webhook", "kueue-webhook", server=True, hosts=("127.0.0.1",))
    (certs / "tls.crt").write_bytes(pair.cert.read_bytes())
    (certs / "tls.key").write_bytes(pair.key.read_bytes())
    config = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(certs)},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
        "managedJobsNamespaceSelector": {
            "matchExpressions": [
                {
                    "key": "kubernetes.io/metadata.name",
                    "operator": "In",
                    "values": managed_namespaces,
                }
            ]
        },
    }
    cfg_path = cp.root / "kueue-config.yaml"
    cfg_path.write_text(yaml.safe_dump(config))
    token = cp.create_token(NAMESPACE, ACCOUNT)
    kubeconfig = cp.token_kubeconfig("kueue-controller-manager", token)
    # With internal certificate management off, Kueue reads its metrics server's certificate
    # from the fixed path /etc/kueue/metrics/certs (cmd/kueue/main.go) and exits without it:
    # the controller runs in a mount namespace of its own where the tier's certificate is there.
    proc = cp._spawn(
        "kueue",
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            f'mkdir -p {METRICS_CERTS} && mount --bind "$0" {METRICS_CERTS} && exec "$@"',
            str(certs),
            str(kueue_bin),
            f"--config={cfg_path}",
            f"--kubeconfig={kubeconfig}",
            # the on-demand visibility API server would listen on every interface; the tier
            # does not serve it (its APIService is not installed)
            "--feature-gates=VisibilityOnDemand=false",
            "--zap-log-level=2",
        ],
    )
    import socket

    def serving() -> bool:
        with socket.socket() as s:
            s.settimeout(1)
            return s.connect_ex(("127.0.0.1", port)) == 0

    cp.wait_for(serving, "Kueue's webhook server", 120)
    cp.apply(hooks)
    return proc
