"""One attempt of a container step, as the engine hands it to whatever starts it.

The engine works out everything a pod needs (argv, environment, working directory, its
directory and log file) into a :class:`Pod`; then two small hooks take over:

* :data:`PreparePod` (``EngineOptions.prepare_pod``): what the machine the pod lands on adds
  to it (e.g. a pod of a region gets that region's store keys
  and link emulator). Identity when unset.
* :data:`Launcher` (``EngineOptions.launch``): starts the pod's process and returns it. The
  default, :func:`launch_process`, runs it here as its own process group; a container
  launcher (the pod's image, user and mounts) is another implementation of the same call.

The engine waits for the returned process, stops it (SIGTERM, then SIGKILL) through its
process group, and reads its exit status as a kubelet would. When the pod's main process has
ended, :func:`end_pod` ends what it left behind, as a container's end does.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import IO, Any

__all__ = ["EndPod", "Launcher", "Pod", "PreparePod", "end_pod", "launch_process", "replace"]

log = logging.getLogger(__name__)
#: Every process of a local pod inherits it (the engine sets it): the pod's "cgroup".
POD_MARK = "BURST_POD_DIR"


@dataclass(frozen=True)
class Pod:
    """One attempt of one container step."""

    step: str  # the step's name as Argo displays it (``worker``, ``teardown(0:eu)``)
    key: str  # unique in the run: the step, qualified by the fan-out it runs under
    template: str  # the container template's name
    path: str  # the node's path from the entrypoint (``main/regions(0:eu)/worker``)
    argv: list[str]
    env: dict[str, str]
    cwd: str
    pod_dir: Path  # the pod's own directory (its /tmp is pod_dir/tmp)
    log_file: Path
    inputs: dict[str, str] = field(default_factory=dict)  # the template's input parameters
    exit_handler: bool = False
    # What a container launcher needs besides the process above (burst.runner.containers):
    # the template's container, substituted but not mapped onto this machine (image,
    # command, args, securityContext), the pod's securityContext, each volume's mountPath
    # with the local directory behind it, and the template's environment as written.
    container: dict[str, Any] | None = None
    pod_security: dict[str, Any] | None = None
    mounts: tuple[tuple[str, Path], ...] = ()
    container_env: dict[str, str] = field(default_factory=dict)

    def unmap(self, value: str) -> str:
        """A value the engine mapped onto this machine (a volume's local directory, the
        pod's /tmp) as the pod sees it; anything else unchanged."""
        head, sep, tail = value.partition("=")
        if sep and tail.startswith("/") and not head.startswith("/"):
            return head + sep + self.unmap(tail)
        pairs = [(str(local), mount) for mount, local in self.mounts]
        pairs.append((str(self.pod_dir / "tmp"), "/tmp"))
        for local, mount in sorted(pairs, key=lambda p: -len(p[0])):
            if value == local or value.startswith(local.rstrip("/") + "/"):
                return mount.rstrip("/") + value[len(local.rstrip("/")) :] or "/"
        return value


PreparePod = Callable[[Pod], Pod]
Launcher = Callable[[Pod, IO[bytes]], "subprocess.Popen[bytes]"]
#: Ends what a pod left behind once its main process ended (:func:`end_pod` by default).
EndPod = Callable[[Path], int]


def launch_process(pod: Pod, log: IO[bytes]) -> subprocess.Popen[bytes]:
    """The pod as a process of this machine, in a session (process group) of its own."""
    return subprocess.Popen(
        pod.argv,
        stdout=log,
        stderr=subprocess.STDOUT,
        env=pod.env,
        cwd=pod.cwd,
        start_new_session=True,
    )


def end_pod(pod_dir: Path, proc_root: Path = Path("/proc")) -> int:
    """The pod's main process has ended: SIGKILL every process still in the pod, as the
    container runtime does when a container's main process exits (a process that started a
    session of its own, such as the background checkpoint writer, is still in the
    container's cgroup). Locally a pod's processes are those whose environment names its
    directory (``BURST_POD_DIR``). Returns how many were killed; without ``/proc``, none."""
    mark = f"{POD_MARK}={pod_dir}".encode()
    killed = 0
    with contextlib.suppress(OSError):
        for entry in proc_root.iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone, or another user's
                continue
            if mark in environ.split(b"\0"):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(entry.name), signal.SIGKILL)
                    killed += 1
    if killed:
        log.info("pod %s ended: %d process(es) left in it killed", pod_dir.name, killed)
    return killed
