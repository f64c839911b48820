"""A real kubelet (v1.35.4, built in engines/kube) with containerd (v2.4.2) and Debian's runc
joins the tier's control plane as ``system:node:real-0`` and runs a hostNetwork pod to
``Succeeded`` (docs/reference/engines-tier.md, "A real kubelet").

The image is made here: an OCI tar of Debian's static busybox, imported with ``ctr``
(``imagePullPolicy: Never``; nothing is pulled). The node registers with the taint
``burst.dev/real-kubelet=true:NoSchedule`` so that no other test's pod lands on it, and is
deleted at the end. What this machine lacks (root, runc, the CNI plugins, a static busybox, a
runtime or kubelet that starts) skips the test with one line naming it.

Everything it starts is ended by PID and everything it leaves outside its own directory is
removed, pass or fail: the kubelet's ``/var/lib/kubelet/device-plugins`` socket, the shims'
``/run/containerd/s``, the ``kubepods`` cgroups, ``/var/log/containers`` links, the mounts.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import engines
from devtools.cluster.controlplane import ControlPlane, Process, free_port

NODE = "real-0"
TAINT = {"key": "burst.dev/real-kubelet", "value": "true", "effect": "NoSchedule"}
NAMESPACE = "real-kubelet"
BUSYBOX = Path("/bin/busybox")
CNI_BIN = Path("/usr/lib/cni")
PAUSE_IMAGE = "localhost/pause:bb"
POD_IMAGE = "localhost/busybox:static"
# paths the kubelet and the shims use whatever they are told (cleaned up after)
DEVICE_PLUGINS = Path("/var/lib/kubelet/device-plugins")
RUN_CONTAINERD = Path("/run/containerd")
CONTAINER_LOGS = Path("/var/log/containers")


def _wait(ready: Callable[[], bool], what: str, timeout: float, every: float = 0.5) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        time.sleep(every)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def _is_static(path: Path) -> bool:
    """An ELF executable with no program interpreter (PT_INTERP)."""
    data = path.read_bytes()
    if data[:4] != b"\x7fELF" or data[4] != 2:  # 64-bit only
        return False
    (phoff,) = struct.unpack_from("<Q", data, 0x20)
    phentsize, phnum = struct.unpack_from("<HH", data, 0x36)
    return all(struct.unpack_from("<I", data, phoff + i * phentsize)[0] != 3 for i in range(phnum))


def _missing() -> str | None:
    """What this machine lacks for the test, in one line (None: nothing)."""
    if os.geteuid() != 0:
        return "root (the kubelet and containerd run as root)"
    if not (shutil.which("runc") or Path("/usr/sbin/runc").is_file()):
        return "runc (Debian package runc; scripts/system-deps.sh)"
    if not (CNI_BIN / "loopback").is_file():
        return f"{CNI_BIN}/loopback (Debian package containernetworking-plugins)"
    if not BUSYBOX.is_file() or not _is_static(BUSYBOX):
        return f"a static {BUSYBOX} (Debian package busybox-static)"
    if not _cgroup_mounts():
        return "a mounted cgroup hierarchy"
    return None


def _oci_tar(out: Path, name: str, cmd: list[str]) -> None:
    """An OCI image layout tar of one layer: the static busybox and a few links to it."""

    def add(tf: tarfile.TarFile, name: str, data: bytes) -> None:
        ti = tarfile.TarInfo(name)
        ti.size, ti.mtime = len(data), 0
        tf.addfile(ti, io.BytesIO(data))

    def blob(tf: tarfile.TarFile, data: bytes, media: str) -> dict[str, Any]:
        digest = hashlib.sha256(data).hexdigest()
        add(tf, f"blobs/sha256/{digest}", data)
        return {"mediaType": media, "digest": f"sha256:{digest}", "size": len(data)}

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as lt:
        for d in ("bin", "tmp", "etc", "proc", "sys", "dev"):
            ti = tarfile.TarInfo(d)
            ti.type, ti.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            lt.addfile(ti)
        lt.add(str(BUSYBOX), "bin/busybox")
        for link in ("sh", "echo", "sleep", "cat"):
            ti = tarfile.TarInfo(f"bin/{link}")
            ti.type, ti.linkname = tarfile.SYMTYPE, "busybox"
            lt.addfile(ti)
    layer = buf.getvalue()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/bin"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
    }
    with tarfile.open(out, "w") as tf:
        add(tf, "oci-layout", b'{"imageLayoutVersion":"1.0.0"}')
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": blob(
                tf, json.dumps(config).encode(), "application/vnd.oci.image.config.v1+json"
            ),
            "layers": [blob(tf, layer, "application/vnd.oci.image.layer.v1.tar")],
        }
        desc = blob(tf, json.dumps(manifest).encode(), "application/vnd.oci.image.manifest.v1+json")
        desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": name.split(":")[-1],
        }
        desc["platform"] = {"architecture": "amd64", "os": "linux"}
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [desc],
        }
        add(tf, "index.json", json.dumps(index).encode())


def _cgroup_mounts() -> list[Path]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        fstype = fields[fields.index("-") + 1]
        if fstype in ("cgroup", "cgroup2"):
            found.append(Path(fields[4]))
    return found


def _mounts_under(*roots: Path) -> list[str]:
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        target = line.split()[4].replace("\\040", " ")
        if any(target == str(r) or target.startswith(f"{r}/") for r in roots):
            found.append(target)
    return found


def _pids_in(cgroup: Path) -> list[int]:
    pids: list[int] = []
    for procs in cgroup.rglob("cgroup.procs"):
        with contextlib.suppress(OSError, ValueError):
            pids += [int(p) for p in procs.read_text().split()]
    return pids


def _pids_of(exe: Path) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            with contextlib.suppress(OSError):
                if Path(os.readlink(d / "exe")) == exe:
                    pids.append(int(d.name))
    return pids


def _kill(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class RealNode:
    """containerd + the kubelet under one short directory (unix socket paths are short)."""

    def __init__(self, cp: ControlPlane, bins: dict[str, Path]) -> None:
        self.cp = cp
        self.bins = bins
        self.dir = Path(tempfile.mkdtemp(prefix="burst-rk-", dir="/tmp"))
        self.sock = self.dir / "containerd.sock"
        self.procs: list[Process] = []
        self.containerd: Process | None = None
        self.kubelet: Process | None = None
        # what existed before: only what this test made is removed
        self.had_run_containerd = RUN_CONTAINERD.exists()
        self.run_s_before = (
            set(os.listdir(RUN_CONTAINERD / "s")) if (RUN_CONTAINERD / "s").is_dir() else set()
        )
        self.had_var_lib_kubelet = DEVICE_PLUGINS.parent.exists()
        self.plugins_before = set(os.listdir(DEVICE_PLUGINS)) if DEVICE_PLUGINS.is_dir() else set()
        self.had_container_logs = CONTAINER_LOGS.exists()
        self.logs_before = set(os.listdir(CONTAINER_LOGS)) if CONTAINER_LOGS.is_dir() else set()
        self.new_cgroups = [
            m / "kubepods" for m in _cgroup_mounts() if not (m / "kubepods").exists()
        ]

    # -- containerd --------------------------------------------------------------------------

    def start_containerd(self, timeout: float = 30.0) -> None:
        cni = self.dir / "cni"
        cni.mkdir()
        (cni / "10-loopback.conflist").write_text(
            json.dumps({"cniVersion": "1.0.0", "name": "lo", "plugins": [{"type": "loopback"}]})
        )
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
        env = {"PATH": f"{self.bins['containerd'].parent}:{os.environ.get('PATH', '')}"}
        self.containerd = Process(
            "containerd",
            [str(self.bins["containerd"]), "--config", str(self.dir / "containerd.toml")],
            self.dir / "logs" / "containerd.log",
            env,
        )
        self.procs.append(self.containerd)
        c = self.containerd
        try:
            _wait(lambda: not c.alive() or self._ctr_ok(), "containerd's socket", timeout)
        except TimeoutError:
            pytest.skip(f"containerd did not start here in {timeout:.0f} s: {c.tail(1)}")
        if not c.alive():
            pytest.skip(f"containerd cannot start here: {c.tail(1)}")

    def ctr(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.bins["ctr"]), "--address", str(self.sock), "--namespace", "k8s.io", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def _ctr_ok(self) -> bool:
        return self.sock.exists() and self.ctr("version", timeout=10).returncode == 0

    def import_images(self) -> None:
        for name, cmd in ((PAUSE_IMAGE, ["/bin/busybox", "sleep", "2147483647"]),
                          (POD_IMAGE, ["/bin/sh"])):  # fmt: skip
            tar = self.dir / f"{name.split('/')[-1].replace(':', '-')}.tar"
            _oci_tar(tar, name, cmd)
            out = self.ctr("images", "import", "--platform", "linux/amd64", str(tar))
            assert out.returncode == 0, f"ctr images import {name}: {out.stderr.strip()}"
        listed = self.ctr("images", "ls", "-q").stdout.split()
        assert {PAUSE_IMAGE, POD_IMAGE} <= set(listed), listed

    # -- the kubelet -------------------------------------------------------------------------

    def start_kubelet(self, timeout: float = 30.0) -> None:
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
            "cgroupsPerQOS": True,
            "enforceNodeAllocatable": [],
            "containerRuntimeEndpoint": f"unix://{self.sock}",
            "imageServiceEndpoint": f"unix://{self.sock}",
            "registerNode": True,
            "registerWithTaints": [TAINT],
            "staticPodPath": "",
            "resolvConf": "/etc/resolv.conf",
            "serializeImagePulls": False,
            "evictionHard": {},
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "podLogsDir": str(self.dir / "pod-logs"),
        }
        (self.dir / "kubelet.yaml").write_text(yaml.safe_dump(config))
        kubeconfig = self.cp.kubeconfig(f"system:node:{NODE}", ("system:nodes",))
        self.kubelet = Process(
            "kubelet",
            [
                str(self.bins["kubelet"]),
                f"--config={self.dir / 'kubelet.yaml'}",
                f"--kubeconfig={kubeconfig}",
                f"--hostname-override={NODE}",
                f"--root-dir={self.dir / 'kubelet'}",
                f"--cert-dir={self.dir / 'kubelet-certs'}",
                "--v=2",
            ],
            self.dir / "logs" / "kubelet.log",
            {},
        )
        self.procs.append(self.kubelet)
        k = self.kubelet
        try:
            _wait(lambda: not k.alive() or self._node() is not None, "the node", timeout)
        except TimeoutError:
            pytest.fail(f"the kubelet registered no node in {timeout:.0f} s:\n{k.tail()}")
        if not k.alive():
            last = [ln for ln in k.tail(40).splitlines() if ln.startswith(("E", "F"))]
            pytest.skip(f"the kubelet cannot start here: {(last or [k.tail(1)])[-1]}")

    def _node(self) -> dict[str, Any] | None:
        out = self.cp.kubectl("get", "node", NODE, "-o", "json", check=False, timeout=20)
        return json.loads(out.stdout) if out.returncode == 0 else None

    def ready(self) -> bool:
        node = self._node() or {}
        conds = node.get("status", {}).get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "True" for c in conds)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(15)}" for p in self.procs)

    # -- the end -----------------------------------------------------------------------------

    def cleanup(self) -> None:
        errors: list[str] = []
        if self.kubelet is not None:
            self.kubelet.stop()
        # the containers' processes: in the kubepods cgroups this test made, then the shims
        for _ in range(3):
            _kill([p for cg in self.new_cgroups if cg.exists() for p in _pids_in(cg)])
            _kill(_pids_of(self.bins["containerd-shim-runc-v2"]))
            time.sleep(0.3)
        if self.containerd is not None:
            self.containerd.stop()
        for target in reversed(_mounts_under(self.dir)):
            out = subprocess.run(["umount", "-l", target], capture_output=True, text=True)
            if out.returncode != 0:
                errors.append(f"umount {target}: {out.stderr.strip()}")
        for cg in self.new_cgroups:
            if not cg.exists():
                continue
            dirs = sorted((d for d in cg.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts))
            for d in [*dirs, cg]:
                with contextlib.suppress(FileNotFoundError):
                    try:
                        _wait(lambda d=d: _rmdir(d), f"rmdir {d}", 10, every=0.2)
                    except TimeoutError as exc:
                        errors.append(str(exc))
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
                shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        if not self.had_container_logs:
            shutil.rmtree(CONTAINER_LOGS, ignore_errors=True)
        elif CONTAINER_LOGS.is_dir():
            for name in set(os.listdir(CONTAINER_LOGS)) - self.logs_before:
                with contextlib.suppress(OSError):
                    (CONTAINER_LOGS / name).unlink()
        self.cp.kubectl("delete", "node", NODE, "--ignore-not-found", "--wait=false", check=False)
        if not _mounts_under(self.dir):
            shutil.rmtree(self.dir, ignore_errors=True)
        else:
            errors.append(f"mounts left under {self.dir}: {_mounts_under(self.dir)}")
        assert not errors, "cleanup: " + "; ".join(errors)


def _rmdir(d: Path) -> bool:
    try:
        d.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


@pytest.fixture
def real_node(cp: ControlPlane) -> Iterator[RealNode]:
    missing = _missing()
    if missing:
        pytest.skip(f"a real kubelet needs {missing}")
    try:
        bins = engines.binaries(["kubernetes", "containerd"])
    except engines.BuildFailed as exc:
        pytest.skip(f"a real kubelet needs the kubelet and containerd built: {exc}")
    node = RealNode(cp, bins)
    try:
        yield node
    finally:
        node.cleanup()


def test_real_kubelet_runs_a_host_network_pod(cp: ControlPlane, real_node: RealNode) -> None:
    real_node.start_containerd()
    real_node.import_images()
    real_node.start_kubelet()
    try:
        _wait(real_node.ready, f"node {NODE} Ready", 90)
    except TimeoutError:
        pytest.fail(f"node {NODE} never became Ready:\n{real_node.logs()}")
    node = real_node._node() or {}
    # registered as the node's own identity, with the taint that keeps other tests' pods off
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == NODE
    assert TAINT in node["spec"].get("taints", [])
    assert node["status"]["nodeInfo"]["kubeletVersion"] == engines.KUBERNETES
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")

    cp.kubectl("create", "namespace", NAMESPACE)
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "hostnet-echo", "namespace": NAMESPACE},
            "spec": {
                "hostNetwork": True,
                "restartPolicy": "Never",
                "automountServiceAccountToken": False,
                "nodeSelector": {"kubernetes.io/hostname": NODE},
                "tolerations": [{**TAINT, "operator": "Equal"}],
                "containers": [
                    {
                        "name": "c",
                        "image": POD_IMAGE,
                        "imagePullPolicy": "Never",
                        "command": ["/bin/sh", "-c", "echo hello from a real kubelet"],
                    }
                ],
            },
        }
        cp.apply([pod])

        def phase() -> str:
            got = cp.get_json("pod", "hostnet-echo", "-n", NAMESPACE)
            return str(got.get("status", {}).get("phase", ""))

        try:
            _wait(lambda: phase() in ("Succeeded", "Failed"), "the pod to finish", 120, every=1)
        except TimeoutError:
            status = cp.get_json("pod", "hostnet-echo", "-n", NAMESPACE).get("status")
            pytest.fail(f"the pod did not finish: {status}\n{real_node.logs()}")
        got = cp.get_json("pod", "hostnet-echo", "-n", NAMESPACE)
        assert got["spec"]["nodeName"] == NODE
        assert got["status"]["phase"] == "Succeeded", (got["status"], real_node.logs())
        (state,) = got["status"]["containerStatuses"]
        assert state["state"]["terminated"]["exitCode"] == 0
        assert state["containerID"].startswith("containerd://")
        # the container ran in containerd under runc: its log is the kubelet's file
        logs = list((real_node.dir / "pod-logs").rglob("0.log"))
        assert logs and "hello from a real kubelet" in logs[0].read_text(), logs
    finally:
        cp.kubectl(
            "delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=false", "--grace-period=0",
            check=False,
        )  # fmt: skip
        # let the kubelet tear the pod down (sandbox, mounts) before it is stopped
        with contextlib.suppress(TimeoutError):
            _wait(
                lambda: (
                    not cp.kubectl(
                        "get", "pods", "-n", NAMESPACE, "-o", "name", check=False, timeout=20
                    ).stdout.strip()
                ),
                "the pod's deletion",
                30,
            )
