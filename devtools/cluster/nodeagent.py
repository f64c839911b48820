"""The engines tier's stand-in for the kubelet: nodes shaped like a run's node groups, and the
pods the real scheduler binds to them run as real processes.

What a kubelet does that this does too, through the real API server and as the node's own
identity (``system:node:<name>`` in ``system:nodes``, so the Node authorizer and the
NodeRestriction admission plugin judge every call):

* registers its Node (labels, taints, capacity such as ``nvidia.com/gpu``) and renews its
  Lease in ``kube-node-lease``, so the node lifecycle controller sees it Ready;
* for each pod bound to it: makes its volumes (emptyDir; projected service-account tokens
  through the TokenRequest API, ``kube-root-ca.crt``, the namespace; configMaps; secrets),
  runs the init containers one after another, then the containers together, each in a mount
  namespace of its own where each volumeMount (subPath too) is at its mountPath and ``/tmp``
  is the container's own, as the pod's ``runAsUser``/``runAsGroup``/``fsGroup`` with every
  capability dropped and ``no_new_privs``; reports the pod's phase and each container's state
  and exit code on ``pods/status``;
* on a pod's deletion (an eviction, a drain, ``kubectl delete``): SIGTERM to every container,
  SIGKILL after the grace period, the final status, then the pod's removal (grace 0).

What it does not do (docs/reference/engines-tier.md lists it): no container image. A
container runs this machine's filesystem (the project's virtual environment on PATH, so
``python -m burst.steps.<name>`` is the checkout's code, and Argo's ``argoexec`` built from its
module), in this machine's network namespace (pods reach the API server and each other on
loopback), without cgroups (no CPU or memory limit is enforced), and without probes,
restarts of containers, ``exec``/``logs`` through the API, or image pulls.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from devtools.cluster.controlplane import ControlPlane

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
LEASE_S = 40
RENEW_S = 10.0
POLL_S = 0.5

# Run inside the container's mount namespace (unshare -m, private propagation): every source
# was bound beside the stage first, because /tmp (and /root, which is 0700 here) are covered
# next; then each is moved to its target, and the command runs as the pod's user.
_MOUNT_SCRIPT = r"""
set -eu
stage="$1"; shift
i=0
while IFS='	' read -r kind src target ro; do
  i=$((i+1))
  if [ -d "$src" ]; then mkdir -p "$stage/$i"; else mkdir -p "$stage"; : > "$stage/$i"; fi
  mount --bind "$src" "$stage/$i"
done < "$stage.mounts"
mount -t tmpfs -o mode=0755,size=64m tmpfs /root
mount --bind "$stage.tmp" /tmp
i=0
while IFS='	' read -r kind src target ro; do
  i=$((i+1))
  if [ -d "$stage/$i" ]; then mkdir -p "$target"
  else mkdir -p "$(dirname "$target")"; [ -e "$target" ] || : > "$target"; fi
  mount --move "$stage/$i" "$target"
  if [ "$ro" = ro ]; then mount -o remount,bind,ro "$target"; fi
done < "$stage.mounts"
exec "$@"
"""


@dataclass(frozen=True)
class NodeShape:
    """A node as a node group makes it: its labels, taints and what it can hold."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: Sequence[Mapping[str, str]] = ()
    capacity: Mapping[str, str] = field(
        default_factory=lambda: {"cpu": "16", "memory": "64Gi", "pods": "32"}
    )


class NodeClient:
    """Calls to the API server as one node."""

    def __init__(self, cp: ControlPlane, node: str) -> None:
        assert cp.ca is not None
        pair = cp.ca.issue(f"node-{node}", f"system:node:{node}", groups=("system:nodes",))
        self.base = cp.server
        self.s = requests.Session()
        self.s.cert = (str(pair.cert), str(pair.key))
        # passed on each request: a session's own verify loses to REQUESTS_CA_BUNDLE
        self.verify = str(cp.pki / "ca.crt")

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        ok: Sequence[int] = (200, 201),
        ctype: str = "application/json",
    ) -> Any:
        data = None if body is None else json.dumps(body)
        r = self.s.request(
            method,
            self.base + path,
            data=data,
            headers={"Content-Type": ctype},
            timeout=30,
            verify=self.verify,
        )
        if r.status_code not in ok:
            raise requests.HTTPError(f"{method} {path}: {r.status_code} {r.text[:300]}")
        return r.json() if r.content else None


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _micro_now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class PodRun:
    """One pod on one node: its volumes, its containers' processes, its reported status."""

    def __init__(self, agent: NodeAgent, node: str, pod: dict[str, Any]) -> None:
        self.agent = agent
        self.node = node
        self.pod = pod
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.dir = agent.root / "pods" / f"{self.ns}_{self.name}_{self.uid[:8]}"
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.lock = threading.Lock()
        self.terminating = False
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"pod-{self.name}", daemon=True)

    @property
    def client(self) -> NodeClient:
        return self.agent.clients[self.node]

    # -- status --------------------------------------------------------------------------

    def _patch_status(self, status: dict[str, Any]) -> None:
        path = f"/api/v1/namespaces/{self.ns}/pods/{self.name}/status"
        with contextlib.suppress(requests.HTTPError):  # gone already: nothing to report to
            self.client.call(
                "PATCH", path, {"status": status}, ctype="application/strategic-merge-patch+json"
            )

    def _conditions(self, ready: bool) -> list[dict[str, Any]]:
        t = _now()
        flag = "True" if ready else "False"
        return [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": flag, "lastTransitionTime": t},
            {"type": "Ready", "status": flag, "lastTransitionTime": t},
        ]

    def _state(self, c: dict[str, Any], state: dict[str, Any]) -> dict[str, Any]:
        return {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": "",
            "containerID": f"standin://{self.uid[:8]}-{c['name']}",
            "ready": "running" in state,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }

    # -- volumes -------------------------------------------------------------------------

    def _token(self, account: str, source: dict[str, Any]) -> str:
        body = {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {
                "audiences": [source["audience"]] if source.get("audience") else None,
                "expirationSeconds": int(source.get("expirationSeconds", 3607)),
                "boundObjectRef": {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "name": self.name,
                    "uid": self.uid,
                },
            },
        }
        out = self.client.call(
            "POST", f"/api/v1/namespaces/{self.ns}/serviceaccounts/{account}/token", body
        )
        return str(out["status"]["token"])

    def _keys(self, kind: str, name: str, optional: bool) -> dict[str, bytes]:
        try:
            obj = self.client.call("GET", f"/api/v1/namespaces/{self.ns}/{kind}/{name}")
        except requests.HTTPError:
            if optional:
                return {}
            raise
        if kind == "secrets":
            return {k: base64.b64decode(v) for k, v in (obj.get("data") or {}).items()}
        return {k: str(v).encode() for k, v in (obj.get("data") or {}).items()}

    def _write_items(
        self, target: Path, data: dict[str, bytes], items: Sequence[dict[str, Any]] | None
    ) -> None:
        pairs = [(i["key"], i["path"]) for i in items] if items else [(k, k) for k in data]
        for key, rel in pairs:
            if key in data:
                out = target / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(data[key])
                out.chmod(0o644)

    def _volumes(self) -> dict[str, Path]:
        spec = self.pod["spec"]
        sc = spec.get("securityContext") or {}
        fs_group = sc.get("fsGroup")
        made: dict[str, Path] = {}
        for v in spec.get("volumes") or []:
            d = self.dir / "volumes" / v["name"]
            d.mkdir(parents=True, exist_ok=True)
            if "emptyDir" in v:
                d.chmod(0o777)
            elif "projected" in v:
                for src in v["projected"].get("sources") or []:
                    if "serviceAccountToken" in src:
                        sat = src["serviceAccountToken"]
                        token = self._token(spec.get("serviceAccountName", "default"), sat)
                        (d / sat["path"]).write_text(token)
                    elif "configMap" in src:
                        cm = src["configMap"]
                        self._write_items(
                            d,
                            self._keys("configmaps", cm["name"], bool(cm.get("optional"))),
                            cm.get("items"),
                        )
                    elif "secret" in src:
                        sec = src["secret"]
                        self._write_items(
                            d,
                            self._keys("secrets", sec["name"], bool(sec.get("optional"))),
                            sec.get("items"),
                        )
                    elif "downwardAPI" in src:
                        for item in src["downwardAPI"].get("items") or []:
                            ref = (item.get("fieldRef") or {}).get("fieldPath", "")
                            (d / item["path"]).write_text(self._field(ref))
                for f in d.rglob("*"):
                    f.chmod(0o644 if f.is_file() else 0o755)
            elif "configMap" in v:
                cm = v["configMap"]
                self._write_items(
                    d,
                    self._keys("configmaps", cm["name"], bool(cm.get("optional"))),
                    cm.get("items"),
                )
            elif "secret" in v:
                sec = v["secret"]
                self._write_items(
                    d,
                    self._keys("secrets", sec["secretName"], bool(sec.get("optional"))),
                    sec.get("items"),
                )
            else:
                kinds = sorted(k for k in v if k != "name")
                raise ValueError(
                    f"volume {v['name']}: {kinds} is not one the stand-in kubelet makes"
                )
            if fs_group is not None:
                for p in [d, *d.rglob("*")]:
                    os.chown(p, -1, int(fs_group))
            made[v["name"]] = d
        return made

    # -- containers ----------------------------------------------------------------------

    def _field(self, path: str) -> str:
        meta = self.pod["metadata"]
        simple = {
            "metadata.name": self.name,
            "metadata.namespace": self.ns,
            "metadata.uid": self.uid,
            "spec.nodeName": self.node,
            "spec.serviceAccountName": self.pod["spec"].get("serviceAccountName", "default"),
            "status.podIP": "127.0.0.1",
            "status.hostIP": "127.0.0.1",
        }
        if path in simple:
            return simple[path]
        for prefix, values in (
            ("metadata.labels", meta.get("labels")),
            ("metadata.annotations", meta.get("annotations")),
        ):
            if path.startswith(prefix + "['") and path.endswith("']"):
                return str((values or {}).get(path[len(prefix) + 2 : -2], ""))
        raise ValueError(f"fieldRef {path!r} is not one the stand-in kubelet resolves")

    def _env(self, c: dict[str, Any]) -> dict[str, str]:
        env = {
            "PATH": self.agent.path,
            "HOME": "/tmp",
            "HOSTNAME": self.name,
            "KUBERNETES_SERVICE_HOST": "127.0.0.1",
            "KUBERNETES_SERVICE_PORT": str(self.agent.cp.api_port),
            **self.agent.extra_env,
        }
        for e in c.get("env") or []:
            if "value" in e:
                env[e["name"]] = str(e["value"])
            elif "valueFrom" in e:
                vf = e["valueFrom"]
                if "fieldRef" in vf:
                    env[e["name"]] = self._field(vf["fieldRef"]["fieldPath"])
                elif "secretKeyRef" in vf or "configMapKeyRef" in vf:
                    kind, ref = (
                        ("secrets", vf["secretKeyRef"])
                        if "secretKeyRef" in vf
                        else ("configmaps", vf["configMapKeyRef"])
                    )
                    data = self._keys(kind, ref["name"], bool(ref.get("optional")))
                    if ref["key"] in data:
                        env[e["name"]] = data[ref["key"]].decode()
                elif "resourceFieldRef" in vf:
                    res = vf["resourceFieldRef"]["resource"]
                    group, _, rname = res.partition(".")
                    env[e["name"]] = str(
                        ((c.get("resources") or {}).get(group) or {}).get(rname, "0")
                    )
            else:
                env[e["name"]] = ""
        return env

    def _argv(
        self,
        c: dict[str, Any],
        uid: int | None,
        gid: int | None,
        groups: Sequence[int],
        mounts_file: Path,
        stage: Path,
    ) -> list[str]:
        cmd = [*(c.get("command") or []), *(c.get("args") or [])]
        if not c.get("command"):
            raise ValueError(
                f"container {c['name']} has no command: "
                "the stand-in kubelet runs no image entrypoint"
            )
        priv = ["setpriv", "--no-new-privs", "--inh-caps=-all", "--bounding-set=-all"]
        if uid is not None:
            priv.append(f"--reuid={uid}")
        if gid is not None:
            priv.append(f"--regid={gid}")
        priv.append("--groups=" + ",".join(str(g) for g in groups) if groups else "--clear-groups")
        return [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            _MOUNT_SCRIPT,
            "mount",
            str(stage),
            *priv,
            "--",
            *cmd,
        ]

    def _start(self, c: dict[str, Any], volumes: dict[str, Path]) -> subprocess.Popen[bytes]:
        spec = self.pod["spec"]
        psc = spec.get("securityContext") or {}
        csc = c.get("securityContext") or {}
        uid = csc.get("runAsUser", psc.get("runAsUser"))
        gid = csc.get("runAsGroup", psc.get("runAsGroup"))
        groups = [
            int(g)
            for g in [psc.get("fsGroup"), *(psc.get("supplementalGroups") or [])]
            if g is not None
        ]
        if uid is None and (csc.get("runAsNonRoot") or psc.get("runAsNonRoot")):
            raise ValueError(
                f"container {c['name']}: runAsNonRoot without a runAsUser (no image user to check)"
            )
        cdir = self.dir / "containers" / c["name"]
        (cdir / "tmp").mkdir(parents=True, exist_ok=True)
        (cdir / "tmp").chmod(0o1777)
        stage = Path("/run/burst-tier") / f"{self.uid[:8]}-{c['name']}"
        stage.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for m in c.get("volumeMounts") or []:
            src = volumes[m["name"]]
            if m.get("subPath"):
                src = src / m["subPath"]
                if not src.exists():
                    src.mkdir(parents=True)
                    src.chmod(0o777)
            lines.append(f"vol\t{src}\t{m['mountPath']}\t{'ro' if m.get('readOnly') else 'rw'}")
        # this machine's paths the container runs from (the interpreter, the checkout, the
        # engines) last: a volume at /tmp (Argo's wait container has one) must not hide them
        lines += [f"keep\t{p}\t{p}\trw" for p in self.agent.keep]
        Path(f"{stage}.mounts").write_text("\n".join(lines) + "\n")
        tmp_link = Path(f"{stage}.tmp")
        if tmp_link.is_symlink() or tmp_link.exists():
            tmp_link.unlink()
        tmp_link.symlink_to(cdir / "tmp")
        argv = self._argv(c, uid, gid, groups, Path(f"{stage}.mounts"), stage)
        logf = (cdir / "log.txt").open("ab")
        # the working directory is the checkout's (an image's WORKDIR does not exist here)
        proc = subprocess.Popen(
            argv,
            env=self._env(c),
            cwd=str(self.agent.workdir),
            stdout=logf,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        logf.close()
        return proc

    @staticmethod
    def _code(proc: subprocess.Popen[bytes]) -> int:
        rc = proc.wait()
        return 128 - rc if rc < 0 else rc  # killed by a signal: 128 + its number, as runc

    def _run(self) -> None:
        spec = self.pod["spec"]
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            volumes = self._volumes()
            init_states: list[dict[str, Any]] = []
            for c in spec.get("initContainers") or []:
                if self.terminating:
                    break
                with self.lock:
                    proc = self.procs[c["name"]] = self._start(c, volumes)
                code = self._code(proc)
                init_states.append(self._state(c, self._terminated(code)))
                if code != 0:
                    self._finish(
                        init_states,
                        [
                            self._state(x, {"waiting": {"reason": "PodInitializing"}})
                            for x in spec["containers"]
                        ],
                        failed=True,
                        message=f"init container {c['name']} exited {code}",
                    )
                    return
            if self.terminating:
                self._finish(init_states, [], failed=True, message="deleted before it started")
                return
            with self.lock:
                for c in spec["containers"]:
                    self.procs[c["name"]] = self._start(c, volumes)
            started = {"running": {"startedAt": _now()}}
            self._patch_status(
                {
                    "phase": "Running",
                    "podIP": "127.0.0.1",
                    "podIPs": [{"ip": "127.0.0.1"}],
                    "hostIP": "127.0.0.1",
                    "startTime": _now(),
                    "conditions": self._conditions(True),
                    "initContainerStatuses": init_states,
                    "containerStatuses": [self._state(c, started) for c in spec["containers"]],
                }
            )
            codes = {c["name"]: self._code(self.procs[c["name"]]) for c in spec["containers"]}
            states = [
                self._state(c, self._terminated(codes[c["name"]])) for c in spec["containers"]
            ]
            failed = any(codes.values())
            self._finish(
                init_states,
                states,
                failed=failed,
                message="" if not failed else f"exit codes {codes}",
            )
        except Exception as exc:  # a pod the stand-in cannot run fails as a kubelet's would
            log.warning("pod %s/%s: %s", self.ns, self.name, exc)
            self._patch_status(
                {"phase": "Failed", "reason": "StandInKubelet", "message": str(exc)[:500]}
            )
        finally:
            self.done.set()

    @staticmethod
    def _terminated(code: int) -> dict[str, Any]:
        return {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "finishedAt": _now(),
                "startedAt": _now(),
            }
        }

    def _finish(
        self,
        init: list[dict[str, Any]],
        states: list[dict[str, Any]],
        *,
        failed: bool,
        message: str,
    ) -> None:
        status: dict[str, Any] = {
            "phase": "Failed" if failed else "Succeeded",
            "conditions": self._conditions(False),
            "initContainerStatuses": init,
            "containerStatuses": states,
        }
        if message:
            status["message"] = message
        self._patch_status(status)

    def terminate(self, grace: float) -> None:
        """SIGTERM to every container now, SIGKILL to what is left after ``grace``."""
        if self.terminating:
            return
        self.terminating = True

        def kill() -> None:
            with self.lock:
                procs = list(self.procs.values())
            for p in procs:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(p.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and any(p.poll() is None for p in procs):
                time.sleep(0.1)
            for p in procs:
                if p.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(p.pid, signal.SIGKILL)

        threading.Thread(target=kill, daemon=True).start()


class NodeAgent:
    """Nodes and their pods; :meth:`start` registers the nodes, :meth:`stop` ends every pod."""

    def __init__(
        self,
        cp: ControlPlane,
        root: Path,
        nodes: Sequence[NodeShape],
        *,
        path: str,
        keep: Sequence[str],
        workdir: Path,
        extra_env: Mapping[str, str] | None = None,
    ) -> None:
        self.cp = cp
        self.root = root
        self.nodes = {n.name: n for n in nodes}
        self.path = path
        self.keep = [p for p in dict.fromkeys(keep) if p]
        self.workdir = workdir
        self.extra_env = dict(extra_env or {})
        self.clients: dict[str, NodeClient] = {}
        self.pods: dict[str, PodRun] = {}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.errors: list[str] = []
        self.history: list[tuple[dict[str, Any], str]] = []  # (pod metadata, node): every pod run

    def add_node(self, shape: NodeShape) -> None:
        self.nodes[shape.name] = shape
        self._register(shape)

    def _register(self, n: NodeShape) -> None:
        client = self.clients[n.name] = NodeClient(self.cp, n.name)
        labels = {
            "kubernetes.io/hostname": n.name,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            **n.labels,
        }
        node = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": n.name, "labels": labels},
            "spec": {"taints": [dict(t) for t in n.taints]} if n.taints else {},
        }
        client.call("POST", "/api/v1/nodes", node, ok=(201, 409))
        self._node_status(n)
        lease = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": n.name, "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": n.name,
                "leaseDurationSeconds": LEASE_S,
                "renewTime": _micro_now(),
            },
        }
        client.call(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            lease,
            ok=(201, 409),
        )

    def _node_status(self, n: NodeShape) -> None:
        t = _now()
        status = {
            "capacity": dict(n.capacity),
            "allocatable": dict(n.capacity),
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "KubeletReady",
                    "message": "stand-in kubelet",
                    "lastHeartbeatTime": t,
                    "lastTransitionTime": t,
                },
                *(
                    {
                        "type": k,
                        "status": "False",
                        "reason": "KubeletHasSufficient",
                        "lastHeartbeatTime": t,
                        "lastTransitionTime": t,
                    }
                    for k in ("MemoryPressure", "DiskPressure", "PIDPressure")
                ),
            ],
            "addresses": [
                {"type": "InternalIP", "address": "127.0.0.1"},
                {"type": "Hostname", "address": n.name},
            ],
            "nodeInfo": {
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeletVersion": "v0.0.0-standin",
                "kubeProxyVersion": "",
                "containerRuntimeVersion": "standin://0",
                "kernelVersion": os.uname().release,
                "osImage": "burst engines tier",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        }
        self.clients[n.name].call(
            "PATCH",
            f"/api/v1/nodes/{n.name}/status",
            {"status": status},
            ctype="application/strategic-merge-patch+json",
        )

    def start(self) -> None:
        for n in self.nodes.values():
            self._register(n)
        for target in (self._heartbeat, self._pods_loop):
            t = threading.Thread(target=target, name=target.__name__, daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for run in list(self.pods.values()):
            run.terminate(2.0)
        for run in list(self.pods.values()):
            run.done.wait(10)
        for t in self._threads:
            t.join(5)

    def _heartbeat(self) -> None:
        beats = 0
        while not self._stop.wait(RENEW_S):
            beats += 1
            for n in list(self.nodes.values()):
                try:
                    path = (
                        f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{n.name}"
                    )
                    self.clients[n.name].call(
                        "PATCH",
                        path,
                        {"spec": {"renewTime": _micro_now()}},
                        ctype="application/merge-patch+json",
                    )
                    if beats % 6 == 0:
                        self._node_status(n)
                except requests.RequestException as exc:
                    log.debug("heartbeat of %s: %s", n.name, exc)

    def _pods_loop(self) -> None:
        while not self._stop.wait(POLL_S):
            for name in list(self.nodes):
                try:
                    self._sync(name)
                except requests.RequestException as exc:
                    log.debug("pods of %s: %s", name, exc)
                except Exception as exc:  # the loop must outlive one bad pod
                    self.errors.append(f"{name}: {exc}")
                    log.exception("pods of %s", name)

    def _sync(self, node: str) -> None:
        client = self.clients[node]
        listed = client.call("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        seen = set()
        for pod in listed.get("items") or []:
            meta = pod["metadata"]
            uid = meta["uid"]
            seen.add(uid)
            run = self.pods.get(uid)
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if meta.get("deletionTimestamp"):
                if run is None or run.done.is_set():
                    self._remove(client, pod)
                    self.pods.pop(uid, None)
                    continue
                grace = float(
                    meta.get("deletionGracePeriodSeconds")
                    or pod["spec"].get("terminationGracePeriodSeconds")
                    or 30
                )
                run.terminate(grace)
                continue
            if run is None and phase == "Pending":
                run = self.pods[uid] = PodRun(self, node, pod)
                self.history.append((meta, node))
                run.thread.start()
        for uid in [u for u, r in self.pods.items() if r.node == node and u not in seen]:
            self.pods[uid].terminate(0)
            self.pods.pop(uid, None)

    @staticmethod
    def _remove(client: NodeClient, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        body = {
            "apiVersion": "v1",
            "kind": "DeleteOptions",
            "gracePeriodSeconds": 0,
            "preconditions": {"uid": meta["uid"]},
        }
        client.call(
            "DELETE",
            f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
            body,
            ok=(200, 202, 404, 409),
        )
