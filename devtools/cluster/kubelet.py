"""Real nodes for the tier: the kubelet (v1.35, built in engines/kube) with containerd (v2,
from its module) and Debian's runc, each node under a short directory of its own.

``PodNetwork`` is the pods' network: a network namespace the tier makes, in which each
node's containerd runs, so that the CNI bridge plugin puts the bridge there and every pod's
own namespace hangs off it. Nothing is routed out of it. The services the pods need (the API
server as the ``kubernetes`` Service's cluster IP, the tier's object store) are addresses on
that namespace's loopback, served by ``devtools.cluster.forward`` (listening there, relaying
to this machine's loopback). The kubelet itself stays in this machine's namespace: it reaches
the API server on loopback and containerd by its socket.

``RealNode`` registers as ``system:node:<name>`` (its own client certificate, so the Node
authorizer and NodeRestriction apply), with the taints of its node group; the tier sets its
labels and GPU capacity as the node group would (labels through the API: the kubelet may not
set most of them under NodeRestriction; ``nvidia.com/gpu`` on the node's status, as
Kubernetes documents for an extended resource without a device plugin). Images are imported
with ``ctr`` (``imagePullPolicy: IfNotPresent`` finds them; nothing is pulled).

What these machines need (found on the first try, docs/reference/engines-tier.md): containerd's
``restrict_oom_score_adj`` (no CAP_SYS_RESOURCE), the kubelet's ``failCgroupV1: false`` (a
hybrid cgroup host), ``nsenter --net`` rather than ``ip netns exec`` (which remounts /sys), and
the cleanup of what the kubelet and the shims write outside their directories.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from devtools.cluster.controlplane import ControlPlane, Process, TierError, free_port

log = logging.getLogger(__name__)

CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/pause:bb"
POD_CIDR = "10.244.0.0/16"
#: the ``kubernetes`` Service's cluster IP (the first of the control plane's service range)
API_SERVICE_IP = "10.96.0.1"
#: where pods reach the tier's object store
STORE_SERVICE_IP = "10.96.0.2"
BRIDGE = "burst0"
# paths the kubelet and the shims use whatever they are told (removed at the end when new)
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
RUN_CONTAINERD = Path("/run/containerd")
CONTAINER_LOGS = Path("/var/log/containers")


def wait(ready: Callable[[], bool], what: str, timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def missing() -> str | None:
    """What this machine lacks for real nodes, in one line (None: nothing)."""
    if os.geteuid() != 0:
        return "root (the kubelet and containerd run as root)"
    if not (shutil.which("runc") or Path("/usr/sbin/runc").is_file()):
        return "runc (Debian package runc; scripts/system-deps.sh)"
    for plugin in ("loopback", "bridge", "host-local"):
        if not (CNI_BIN / plugin).is_file():
            return f"{CNI_BIN}/{plugin} (Debian package containernetworking-plugins)"
    if not shutil.which("nsenter") or not shutil.which("ip"):
        return "nsenter and ip (util-linux, iproute2)"
    if not cgroup_mounts():
        return "a mounted cgroup hierarchy"
    return None


def cgroup_mounts() -> list[Path]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def mounts_under(*roots: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if any(target == str(r) or target.startswith(f"{r}/") for r in roots):
            found.append(target)
    return found


def _pids_of(exe: Path) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(d / "exe")) == exe:
                    pids.append(int(d.name))
    return pids


def _pids_in(cgroup: Path) -> list[int]:
    pids: list[int] = []
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def _kill(pids: Sequence[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def _run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)


def reap_stale() -> list[str]:
    """Remove what a killed tier left (its pod network, its nodes' mounts and directories):
    a pod network whose tier process is gone, a node directory no live containerd uses."""
    removed = []
    netns = Path("/run/netns")
    for ns in netns.glob("burst-tier-*") if netns.is_dir() else []:
        pid = ns.name.split("-")[2]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            _run("ip", "netns", "del", ns.name)
            removed.append(str(ns))
    live = {
        str(Path(a).parent)
        for pid in _pids_by_name("containerd")
        for a in _cmdline(pid)
        if a.endswith("containerd.toml")
    }
    for d in Path("/tmp").glob("burst-*"):
        if (d / "containerd.toml").is_file() and str(d) not in live:
            for target in reversed(mounts_under(d)):
                _run("umount", "-l", target)
            if not mounts_under(d):
                shutil.rmtree(d, ignore_errors=True)
                removed.append(str(d))
    return removed


#: the parts of a containerd root that are never written once there: the overlay snapshotter's
#: committed layers (the read-only lower directories of every container) and the content
#: store's blobs; the rest (the metadata databases) each containerd writes
SHARED_PARTS = (
    ("io.containerd.snapshotter.v1.overlayfs", "snapshots"),
    ("io.containerd.content.v1.content", "blobs"),
)


def clone_root(seed: Path, root: Path) -> None:
    """Make ``root`` a containerd root that holds what the stopped root ``seed`` holds: the
    layers' files hard-linked (a node then costs neither the disk nor the minute of importing
    the 6 GB trainer; nothing writes a lower layer: a container's writes go to its own upper
    directory), the databases copied (each containerd writes its own). Across file systems
    everything is copied."""
    root.parent.mkdir(parents=True, exist_ok=True)
    link = os.stat(seed).st_dev == os.stat(root.parent).st_dev
    out = _run("cp", "-a", *(["--link"] if link else []), str(seed), str(root), timeout=1800)
    if out.returncode != 0:
        shutil.rmtree(root, ignore_errors=True)
        raise TierError(f"cannot copy the image seed {seed} to {root}: {out.stderr.strip()}")
    if not link:
        return
    for dirpath, dirnames, filenames in os.walk(root):
        rel = Path(dirpath).relative_to(root).parts
        if rel[:2] in SHARED_PARTS:
            dirnames[:] = []
            continue
        for f in filenames:
            p = Path(dirpath) / f
            st = p.lstat()
            if not p.is_file() or p.is_symlink() or st.st_nlink < 2:
                continue
            own = p.with_name(p.name + ".own")
            shutil.copy2(p, own)
            os.chown(own, st.st_uid, st.st_gid)
            os.replace(own, p)


def _pids_by_name(name: str) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if (d / "comm").read_text().strip() == name:
                    pids.append(int(d.name))
    return pids


def _cmdline(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return []


class PodNetwork:
    """The pods' network namespace and its services (see the module's docstring)."""

    _made = 0

    def __init__(self, root: Path, services: Mapping[tuple[str, int], int]) -> None:
        self.root = root
        PodNetwork._made += 1
        self.name = f"burst-tier-{os.getpid()}-{PodNetwork._made}"
        self.path = Path("/run/netns") / self.name
        self.services = dict(services)  # (address, port) in the namespace -> loopback port
        self.ipam = root / "ipam"
        self.forwarder: Process | None = None

    def add(self, address: str, port: int, target: int) -> None:
        """Serve one more loopback port in the pod network (the forwarder restarts)."""
        if self.services.get((address, port)) == target:
            return
        self.services[(address, port)] = target
        if self.forwarder is not None:
            self.forwarder.stop()
            self._forward()

    def start(self) -> None:
        out = _run("ip", "netns", "add", self.name)
        if out.returncode != 0:
            raise TierError(f"ip netns add {self.name}: {out.stderr.strip()}")
        addresses = sorted({ip for ip, _ in self.services})
        for argv in (
            ("ip", "-n", self.name, "link", "set", "lo", "up"),
            *(("ip", "-n", self.name, "addr", "add", f"{ip}/32", "dev", "lo") for ip in addresses),
        ):
            out = _run(*argv)
            if out.returncode != 0:
                raise TierError(f"{' '.join(argv)}: {out.stderr.strip()}")
        self._forward()

    def _forward(self) -> None:
        pairs = [f"{ip}:{port}=127.0.0.1:{target}" for (ip, port), target in self.services.items()]
        self.forwarder = Process(
            "pod-services",
            [sys.executable, "-m", "devtools.cluster.forward", str(self.path), *pairs],
            self.root / "logs" / "pod-services.log",
            {"PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
        f = self.forwarder
        wait(lambda: not f.alive() or "forwarding" in f.tail(), "the pod services", 20)
        if not f.alive():
            raise TierError(f"the pod services' forwarder exited: {f.tail(3)}")

    def cni_config(self) -> dict[str, Any]:
        return {
            "cniVersion": "1.0.0",
            "name": "burst-tier",
            "plugins": [
                {
                    "type": "bridge",
                    "bridge": BRIDGE,
                    "isGateway": True,
                    "ipMasq": False,
                    "hairpinMode": True,
                    "ipam": {
                        "type": "host-local",
                        "ranges": [[{"subnet": POD_CIDR}]],
                        "routes": [{"dst": "0.0.0.0/0"}],
                        "dataDir": str(self.ipam),
                    },
                },
                {"type": "loopback"},
            ],
        }

    def stop(self) -> None:
        if self.forwarder is not None:
            self.forwarder.stop()
        _run("ip", "netns", "del", self.name)


class RealNode:
    """containerd and the kubelet of one node, under a short directory (unix socket paths
    are short)."""

    def __init__(
        self,
        cp: ControlPlane,
        bins: Mapping[str, Path],
        name: str,
        net: PodNetwork | None,
        *,
        taints: Sequence[Mapping[str, str]] = (),
        log_dir: Path | None = None,
    ) -> None:
        self.cp = cp
        self.bins = dict(bins)
        self.name = name
        self.net = net
        self.taints = [dict(t) for t in taints]
        self.dir = Path(tempfile.mkdtemp(prefix=f"burst-{name[:12]}-", dir="/tmp"))
        self.log_dir = log_dir or self.dir / "logs"
        self.sock = self.dir / "c.sock"
        self.procs: list[Process] = []
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        self.had_run_containerd = RUN_CONTAINERD.exists()
        self.run_s_before = (
            set(os.listdir(RUN_CONTAINERD / "s")) if (RUN_CONTAINERD / "s").is_dir() else set()
        )
        self.had_var_lib_kubelet = DEVICE_PLUGINS.parent.exists()
        self.plugins_before = set(os.listdir(DEVICE_PLUGINS)) if DEVICE_PLUGINS.is_dir() else set()
        self.had_container_logs = CONTAINER_LOGS.exists()
        self.logs_before = set(os.listdir(CONTAINER_LOGS)) if CONTAINER_LOGS.is_dir() else set()

    @property
    def pod_logs(self) -> Path:
        return self.dir / "pod-logs"

    @property
    def kubelet_root(self) -> Path:
        return self.dir / "kubelet"

    # -- containerd --------------------------------------------------------------------------

    def start_containerd(self, timeout: float = 30.0) -> None:
        cni = self.dir / "cni"
        cni.mkdir()
        conf = (
            self.net.cni_config()
            if self.net is not None
            else {"cniVersion": "1.0.0", "name": "lo", "plugins": [{"type": "loopback"}]}
        )
        (cni / "10-tier.conflist").write_text(json.dumps(conf))
        runc = shutil.which("runc") or "/usr/sbin/runc"
        cri = "plugins.'io.containerd.cri.v1.runtime'"
        (self.dir / "containerd.toml").write_text(
            f"""version = 3
root = "{self.dir}/containerd/root"
state = "{self.dir}/containerd/state"
[grpc]
  address = "{self.sock}"
[ttrpc]
  address = "{self.sock}.ttrpc"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "{PAUSE_IMAGE}"
[{cri}]
  # no CAP_SYS_RESOURCE on these machines: runc cannot lower a sandbox's oom_score_adj
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [{cri}.containerd]
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        SystemdCgroup = false
        Root = "{self.dir}/runc"
  [{cri}.cni]
    bin_dirs = ["{CNI_BIN}"]
    conf_dir = "{cni}"
"""
        )
        argv = [str(self.bins["containerd"]), "--config", str(self.dir / "containerd.toml")]
        if self.net is not None:
            # nsenter, not `ip netns exec`: that one remounts /sys and hides the cgroups
            argv = ["nsenter", f"--net={self.net.path}", "--", *argv]
        env = {"PATH": f"{self.bins['containerd'].parent}:{os.environ.get('PATH', '')}"}
        self.containerd = Process(
            f"containerd-{self.name}", argv, self.log_dir / f"containerd-{self.name}.log", env
        )
        self.procs.append(self.containerd)
        c = self.containerd
        wait(lambda: not c.alive() or self._ctr_ok(), f"containerd of {self.name}", timeout)
        if not c.alive():
            raise TierError(f"containerd of {self.name} exited: {c.tail(3)}")

    def ctr(self, *args: str, timeout: float = 600.0) -> subprocess.CompletedProcess[str]:
        return _run(
            str(self.bins["ctr"]), "--address", str(self.sock), "--namespace", "k8s.io", *args,
            timeout=timeout,
        )  # fmt: skip

    def _ctr_ok(self) -> bool:
        return self.sock.exists() and self.ctr("version", timeout=10).returncode == 0

    def import_image(self, tar: Path, name: str, *names: str) -> None:
        """Import the archive holding the image ``name``; tag it with ``names`` too (the
        references the pods name, digest references included)."""
        # unpacked, then its layers dropped from the content store: a node holds the 6 GB
        # trainer once (its snapshots), not twice; several nodes share one disk here
        need = 2 * tar.stat().st_size + (1 << 30)
        free = shutil.disk_usage(self.dir).free
        if free < need:
            raise TierError(
                f"no disk for {tar.name} on {self.name}: {free / 2**30:.1f} GiB free under "
                f"{self.dir.parent}, about {need / 2**30:.1f} GiB needed to import it"
            )
        out = self.ctr(
            "images", "import", "--local", "--platform", "linux/amd64", "--discard-unpacked-layers",
            str(tar),
        )  # fmt: skip
        if out.returncode != 0:
            raise TierError(f"ctr images import {tar.name} on {self.name}: {out.stderr.strip()}")
        for n in names:
            if n == name:
                continue
            got = self.ctr("images", "tag", "--force", name, n)
            if got.returncode != 0:
                raise TierError(f"ctr images tag {name} {n} on {self.name}: {got.stderr.strip()}")

    def images(self) -> list[str]:
        return self.ctr("images", "ls", "-q").stdout.split()

    # -- the kubelet -------------------------------------------------------------------------

    def start_kubelet(self, timeout: float = 60.0) -> None:
        config = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": "127.0.0.1",
            "port": free_port(),
            "readOnlyPort": 0,
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": free_port(),
            "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": False}},
            "authorization": {"mode": "AlwaysAllow"},
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "failCgroupV1": False,  # the host is cgroup v1 (hybrid); 1.35 refuses v1 by default
            # several kubelets on one machine: no shared /kubepods tree; each container's
            # limits are still its own cgroup's (runc)
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": [],
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            "registerNode": True,
            "registerWithTaints": self.taints,
            "staticPodPath": "",
            "resolvConf": "/dev/null",  # no DNS in the pods' network: services by address
            "serializeImagePulls": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "podLogsDir": str(self.pod_logs),
            "maxPods": 110,
            # the node's status after it is Ready is reported hourly: the tier's cloud sets the
            # node group's CPU, memory and GPUs on it (this machine has 2 cores), and the
            # kubelet keeps its view of them; its Lease (every 10 s) is its heartbeat
            "nodeStatusUpdateFrequency": "1h",
            "nodeStatusReportFrequency": "1h",
        }
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(config))
        kubeconfig = self.cp.kubeconfig(f"system:node:{self.name}", ("system:nodes",))
        self.kubelet = Process(
            f"kubelet-{self.name}",
            [
                str(self.bins["kubelet"]),
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={self.name}",
                f"--root-dir={self.kubelet_root}",
                f"--cert-dir={self.dir / 'kubelet-certs'}",
                "--v=2",
            ],
            self.log_dir / f"kubelet-{self.name}.log",
            {},
        )
        self.procs.append(self.kubelet)
        k = self.kubelet
        try:
            wait(lambda: not k.alive() or self.node() is not None, f"node {self.name}", timeout)
        except TimeoutError as exc:
            raise TierError(f"{exc}; the kubelet's log ends:\n{k.tail()}") from None
        if not k.alive():
            last = [ln for ln in k.tail(40).splitlines() if ln.startswith(("E", "F"))]
            raise TierError(f"the kubelet of {self.name} exited: {(last or [k.tail(1)])[-1]}")

    def node(self) -> dict[str, Any] | None:
        out = self.cp.kubectl("get", "node", self.name, "-o", "json", check=False, timeout=20)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def ready(self) -> bool:
        conds = ((self.node() or {}).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def shape(self, labels: Mapping[str, str], extended: Mapping[str, str]) -> None:
        """Labels and extended resources as the node group gives them (the cloud's part)."""
        if labels:
            self.cp.kubectl(
                "label", "node", self.name, "--overwrite",
                *(f"{k}={v}" for k, v in labels.items()),
            )  # fmt: skip
        if extended:
            patch = {"status": {"capacity": dict(extended), "allocatable": dict(extended)}}
            self.cp.kubectl(
                "patch", "node", self.name, "--subresource=status", "--type=merge",
                "-p", json.dumps(patch),
            )  # fmt: skip

    def start(
        self,
        images: Sequence[tuple[Path, str, Sequence[str]]],
        timeout: float = 120,
        *,
        seed: Path | None = None,
    ) -> None:
        """containerd, the images (archive, its image's name, more names), the kubelet.
        ``seed``: a containerd root whose images the node starts with (:func:`clone_root`)."""
        if seed is not None:
            clone_root(seed, self.dir / "containerd" / "root")
        self.start_containerd()
        for tar, name, names in images:
            self.import_image(tar, name, *names)
        self.start_kubelet()
        wait(self.ready, f"node {self.name} Ready", timeout)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in self.procs)

    # -- the end -----------------------------------------------------------------------------

    def stop(self, *, remove: bool = True) -> list[str]:
        """Stop both, kill what their containers left, unmount and remove what they made
        (``remove=False``: keep the node's directory); the errors, if any (each names what is
        left)."""
        errors: list[str] = []
        if self.kubelet is not None:
            self.kubelet.stop()
        shim = self.bins.get("containerd-shim-runc-v2")
        for _ in range(3):
            # the shims of this node (by their socket directory) and their containers
            for pid in _pids_of(shim) if shim else []:
                with contextlib.suppress(OSError):
                    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                    if str(self.sock).encode() in cmdline:
                        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
                        _kill([int(c) for c in children])
                        _kill([pid])
            time.sleep(0.3)
        if self.containerd is not None:
            self.containerd.stop()
        for target in reversed(mounts_under(self.dir)):
            out = _run("umount", "-l", target)
            if out.returncode != 0:
                errors.append(f"umount {target}: {out.stderr.strip()}")
        if not self.had_run_containerd:
            shutil.rmtree(RUN_CONTAINERD, ignore_errors=True)
        elif (RUN_CONTAINERD / "s").is_dir():
            for name in set(os.listdir(RUN_CONTAINERD / "s")) - self.run_s_before:
                with contextlib.suppress(OSError):
                    (RUN_CONTAINERD / "s" / name).unlink()
        if not self.had_var_lib_kubelet:
            shutil.rmtree(DEVICE_PLUGINS.parent, ignore_errors=True)
        elif DEVICE_PLUGINS.is_dir():
            for name in set(os.listdir(DEVICE_PLUGINS)) - self.plugins_before:
                p = DEVICE_PLUGINS / name
                with contextlib.suppress(OSError):
                    shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if not self.had_container_logs:
            shutil.rmtree(CONTAINER_LOGS, ignore_errors=True)
        elif CONTAINER_LOGS.is_dir():
            for name in set(os.listdir(CONTAINER_LOGS)) - self.logs_before:
                with contextlib.suppress(OSError):
                    (CONTAINER_LOGS / name).unlink()
        with contextlib.suppress(TierError):
            self.cp.kubectl("delete", "node", self.name, "--ignore-not-found", "--wait=false",
                            check=False, timeout=20)  # fmt: skip
        if mounts_under(self.dir):
            errors.append(f"mounts left under {self.dir}: {mounts_under(self.dir)}")
        elif remove:
            shutil.rmtree(self.dir, ignore_errors=True)
        return errors
