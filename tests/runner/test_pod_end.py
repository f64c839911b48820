"""A local pod's end kills what its main process left behind, as a container's end does: a
process in a session of its own (the checkpoint writer) does not outlive its trainer and
commit after the trainer was killed (issue 25, bug 6). Real processes, real signals."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from burst.runner.pods import POD_MARK, end_pod

#: The pod's main process: starts a child in a session of its own, prints its pid, exits.
MAIN = (
    "import subprocess, sys; "
    "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'], "
    "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL); "
    "print(p.pid, flush=True)"
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_end_pod_kills_what_the_main_process_left_in_the_pod(tmp_path: Path) -> None:
    pod, other = tmp_path / "pod-1", tmp_path / "pod-2"
    env = {**os.environ, POD_MARK: str(pod)}
    out = subprocess.run(
        [sys.executable, "-c", MAIN], env=env, capture_output=True, text=True, timeout=60
    )
    left = int(out.stdout.strip())
    neighbour = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(300)"],
        env={**os.environ, POD_MARK: str(other)},
    )
    try:
        assert _alive(left)
        assert end_pod(pod) == 1
        deadline = time.monotonic() + 30
        while _alive(left) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(left)
        assert neighbour.poll() is None  # another pod's process is left alone
        assert end_pod(pod) == 0
    finally:
        neighbour.kill()
        neighbour.wait()
        if _alive(left):
            os.kill(left, 9)
