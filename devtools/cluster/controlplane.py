"""A Kubernetes control plane on loopback, from the binaries devtools.engines builds.

etcd, kube-apiserver (x509 client authentication, the Node and RBAC authorizers, the
NodeRestriction, PodSecurity and ValidatingAdmissionPolicy admission plugins, service-account
tokens signed by a key of its own), kube-controller-manager (every default controller, each
with its own service-account credentials) and kube-scheduler. Every process listens on
127.0.0.1 only, on ports chosen free, and writes its log under the tier's directory
(``<root>/logs/<name>.log``). Each identity gets a kubeconfig with a client certificate
(``kubeconfig(user, groups)``), as a cloud's authenticator hands the API server a user name and
groups.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import requests
import yaml

from devtools.cluster.pki import Authority, service_account_keys

log = logging.getLogger(__name__)

ISSUER = "https://kubernetes.default.svc.cluster.local"
SERVICE_RANGE = "10.96.0.0/24"


class TierError(RuntimeError):
    """The tier could not start or a call to it failed (the message names what and where)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _die_with_parent() -> None:
    """In the child: SIGKILL when the process that started it dies (PR_SET_PDEATHSIG), so a
    killed test run leaves no engine holding its ports."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG


class Process:
    """One engine process: its own process group, its log in a file."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: Mapping[str, str]):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log: IO[bytes] = log_path.open("ab")
        self.proc = subprocess.Popen(
            self.argv,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env={**os.environ, **env},
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])

    def stop(self, grace: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()


class ControlPlane:
    """Start with :meth:`start`, end with :meth:`stop` (or use it as a context manager)."""

    def __init__(self, root: Path, binaries: Mapping[str, Path]) -> None:
        self.root = root
        self.bin = dict(binaries)
        self.pki = root / "pki"
        self.processes: dict[str, Process] = {}
        self.api_port = free_port()
        self.server = f"https://127.0.0.1:{self.api_port}"
        self.ca: Authority | None = None
        self.admin: Path = root / "kubeconfigs" / "admin.yaml"

    # -- identities ---------------------------------------------------------------------

    def kubeconfig(self, user: str, groups: Sequence[str] = (), name: str | None = None) -> Path:
        """A kubeconfig that authenticates as ``user`` in ``groups`` (a client certificate)."""
        assert self.ca is not None, "start() first"
        stem = name or user.replace(":", "-").replace("/", "-")
        pair = self.ca.issue(f"user-{stem}", user, groups=tuple(groups))
        return self._write_kubeconfig(
            stem, {"client-certificate": str(pair.cert), "client-key": str(pair.key)}
        )

    def token_kubeconfig(self, stem: str, token: str) -> Path:
        """A kubeconfig that authenticates with a bearer token (a service account's)."""
        return self._write_kubeconfig(stem, {"token": token})

    def _write_kubeconfig(self, stem: str, user: dict[str, str]) -> Path:
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tier",
                    "cluster": {
                        "server": self.server,
                        "certificate-authority": str(self.pki / "ca.crt"),
                    },
                }
            ],
            "users": [{"name": stem, "user": user}],
            "contexts": [{"name": stem, "context": {"cluster": "tier", "user": stem}}],
            "current-context": stem,
        }
        path = self.root / "kubeconfigs" / f"{stem}.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc), encoding="utf-8")
        path.chmod(0o600)
        return path

    # -- processes -----------------------------------------------------------------------

    def _spawn(
        self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None
    ) -> Process:
        p = Process(name, argv, self.root / "logs" / f"{name}.log", env or {})
        self.processes[name] = p
        return p

    def start(self, timeout: float = 120.0) -> None:
        self.ca = Authority(self.pki)
        sa = service_account_keys(self.pki)
        serving = self.ca.issue(
            "apiserver",
            "kube-apiserver",
            server=True,
            hosts=("127.0.0.1", "localhost", "kubernetes", "kubernetes.default.svc", "10.96.0.1"),
        )
        self.kubeconfig("admin", ("system:masters",), name="admin")
        cm = self.kubeconfig("system:kube-controller-manager", name="controller-manager")
        sched = self.kubeconfig("system:kube-scheduler", name="scheduler")

        etcd_port, etcd_peer = free_port(), free_port()
        data = self.root / "etcd"
        self._spawn(
            "etcd",
            [
                str(self.bin["etcd"]),
                "--name=tier",
                f"--data-dir={data}",
                f"--listen-client-urls=http://127.0.0.1:{etcd_port}",
                f"--advertise-client-urls=http://127.0.0.1:{etcd_port}",
                f"--listen-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-advertise-peer-urls=http://127.0.0.1:{etcd_peer}",
                f"--initial-cluster=tier=http://127.0.0.1:{etcd_peer}",
                "--unsafe-no-fsync",  # a test's cluster: throughput over durability
                "--log-level=warn",
            ],
        )
        self._wait_http(f"http://127.0.0.1:{etcd_port}/health", "etcd", timeout)
        self._spawn(
            "kube-apiserver",
            [
                str(self.bin["kube-apiserver"]),
                f"--etcd-servers=http://127.0.0.1:{etcd_port}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--cert-dir={self.pki}",
                f"--tls-cert-file={serving.cert}",
                f"--tls-private-key-file={serving.key}",
                f"--client-ca-file={self.pki / 'ca.crt'}",
                "--authorization-mode=Node,RBAC",
                "--enable-admission-plugins=NodeRestriction,PodSecurity,"
                "ValidatingAdmissionPolicy,MutatingAdmissionPolicy",
                # beta in 1.35, off by default: the tier's pod identity (what a pod identity
                # webhook injects on a cloud) is a MutatingAdmissionPolicy
                "--feature-gates=MutatingAdmissionPolicy=true",
                "--runtime-config=admissionregistration.k8s.io/v1beta1=true",
                "--allow-privileged=false",
                f"--service-account-issuer={ISSUER}",
                f"--api-audiences={ISSUER}",
                f"--service-account-key-file={sa.cert}",
                f"--service-account-signing-key-file={sa.key}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                # the `kubernetes` Service's endpoints would be 127.0.0.1, which Endpoints
                # validation refuses: nothing in the tier reaches the API through that Service
                "--endpoint-reconciler-type=none",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait_ready(timeout)
        self._spawn(
            "kube-controller-manager",
            [
                str(self.bin["kube-controller-manager"]),
                f"--kubeconfig={cm}",
                f"--authentication-kubeconfig={cm}",
                f"--authorization-kubeconfig={cm}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.root / 'cm-certs'}",
                "--leader-elect=false",
                "--use-service-account-credentials=true",
                f"--service-account-private-key-file={sa.key}",
                f"--root-ca-file={self.pki / 'ca.crt'}",
                f"--cluster-signing-cert-file={self.pki / 'ca.crt'}",
                f"--cluster-signing-key-file={self.pki / 'ca.key'}",
                f"--service-cluster-ip-range={SERVICE_RANGE}",
                "--v=1",
            ],
        )
        self._spawn(
            "kube-scheduler",
            [
                str(self.bin["kube-scheduler"]),
                f"--kubeconfig={sched}",
                f"--authentication-kubeconfig={sched}",
                f"--authorization-kubeconfig={sched}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                f"--cert-dir={self.root / 'scheduler-certs'}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        # the controller-manager's service-account controller makes `default` in each namespace
        self.wait_for(
            lambda: (
                self.kubectl(
                    "get", "serviceaccount", "default", "-n", "default", check=False
                ).returncode
                == 0
            ),
            "the default service account (kube-controller-manager)",
            timeout,
        )

    def stop(self) -> None:
        for name in reversed(list(self.processes)):
            self.processes[name].stop()
        self.processes.clear()

    def __enter__(self) -> ControlPlane:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def check_alive(self) -> None:
        for p in self.processes.values():
            if not p.alive():
                raise TierError(f"{p.name} exited {p.proc.returncode}; its log ends:\n{p.tail()}")

    # -- waiting -------------------------------------------------------------------------

    def wait_for(self, ready: Any, what: str, timeout: float = 60.0, every: float = 0.5) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.check_alive()
            if ready():
                return
            time.sleep(every)
        raise TierError(f"timed out after {timeout:.0f} s waiting for {what}")

    def _wait_http(self, url: str, what: str, timeout: float) -> None:
        def ok() -> bool:
            try:
                return requests.get(url, timeout=2).status_code == 200
            except requests.RequestException:
                return False

        self.wait_for(ok, what, timeout)

    def _wait_ready(self, timeout: float) -> None:
        cert = (str(self.pki / "user-admin.crt"), str(self.pki / "user-admin.key"))

        def ok() -> bool:
            try:
                r = requests.get(
                    f"{self.server}/readyz", cert=cert, verify=str(self.pki / "ca.crt"), timeout=3
                )
            except requests.RequestException:
                return False
            return r.status_code == 200

        self.wait_for(ok, "kube-apiserver /readyz", timeout)

    # -- calls ---------------------------------------------------------------------------

    def kubectl(
        self,
        *args: str,
        kubeconfig: Path | None = None,
        stdin: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin["kubectl"]), f"--kubeconfig={kubeconfig or self.admin}", *args]
        proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True, timeout=timeout)
        if check and proc.returncode != 0:
            raise TierError(
                f"kubectl {' '.join(args)} exited {proc.returncode}: {proc.stderr.strip()}"
            )
        return proc

    def get_json(self, *args: str, kubeconfig: Path | None = None) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json", kubeconfig=kubeconfig).stdout)

    def apply(self, docs: Sequence[dict[str, Any]] | str, kubeconfig: Path | None = None) -> str:
        text = docs if isinstance(docs, str) else yaml.safe_dump_all(list(docs))
        return self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            "-",
            stdin=text,
            kubeconfig=kubeconfig,
        ).stdout

    def create_token(self, namespace: str, account: str, duration: str = "24h") -> str:
        return self.kubectl(
            "create", "token", account, "-n", namespace, f"--duration={duration}"
        ).stdout.strip()


@contextlib.contextmanager
def running(root: Path, binaries: Mapping[str, Path]) -> Iterator[ControlPlane]:
    cp = ControlPlane(root, binaries)
    try:
        cp.start()
        yield cp
    finally:
        cp.stop()
