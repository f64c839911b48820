"""Real process trees for the notice tests (no torch: fast).

    python tests/program/tree_prog.py MODE DIR

* ``worker``: catches SIGUSR1 (its handler writes ``DIR/got-<pid>``), then writes
  ``DIR/ready-<pid>`` and sleeps until killed (at most 120 s);
* ``worker-setsid`` / ``worker-setpgid``: a worker that first calls setsid / setpgid itself;
* ``plain``: no handler of its own, starts two ``worker`` children and waits for them;
* ``sessions``: the same, each child in a session of its own (as torchrun starts its workers);
* ``own-groups``: starts a ``worker-setsid`` and a ``worker-setpgid``;
* ``orphan``: starts a middle process that starts a ``worker-setsid`` and exits at once (the
  worker is reparented away from the program's tree), then sleeps;
* ``inherit``: catches SIGUSR1, then forks a child that inherits the handler (as a DataLoader
  worker started by fork does), both write their ready files.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

HERE = Path(__file__).resolve()


def worker(out: Path) -> None:
    def on_notice(_signum: int, _frame: FrameType | None) -> None:
        (out / f"got-{os.getpid()}").write_text("")

    signal.signal(signal.SIGUSR1, on_notice)
    (out / f"ready-{os.getpid()}").write_text("")
    end = time.monotonic() + 120
    while time.monotonic() < end:
        time.sleep(0.05)


def start(mode: str, out: Path, **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, str(HERE), mode, str(out)], **kw)  # type: ignore[call-overload]


def main() -> int:
    mode, out = sys.argv[1], Path(sys.argv[2])
    if mode == "worker":
        worker(out)
    elif mode == "worker-setsid":
        os.setsid()
        worker(out)
    elif mode == "worker-setpgid":
        os.setpgid(0, 0)
        worker(out)
    elif mode in ("plain", "sessions"):
        kids = [start("worker", out, start_new_session=mode == "sessions") for _ in range(2)]
        for k in kids:
            k.wait()
    elif mode == "own-groups":
        kids = [start("worker-setsid", out), start("worker-setpgid", out)]
        for k in kids:
            k.wait()
    elif mode == "orphan-middle":
        start("worker-setsid", out)
    elif mode == "orphan":
        start("orphan-middle", out).wait()
        time.sleep(120)
    elif mode == "inherit":
        signal.signal(signal.SIGUSR1, lambda *_: (out / f"got-{os.getpid()}").write_text(""))
        if os.fork() == 0:
            (out / f"ready-{os.getpid()}").write_text("")
            time.sleep(120)
            os._exit(0)
        (out / f"ready-{os.getpid()}").write_text("")
        time.sleep(120)
    else:
        raise SystemExit(f"unknown mode {mode}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
