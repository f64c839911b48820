"""The train step's quick exit (burst.train.quick_exit): what Python's exit guarantees still
happens (non-daemon threads and executors' pending work finish, atexit handlers run, stdio is
flushed, the code is the one given), and the interpreter's teardown, which took seconds after
torch, does not; under a profiler, Python's own exit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PROGRAM = textwrap.dedent(
    """
    import atexit, os, sys, threading, time
    from concurrent.futures import ThreadPoolExecutor
    from pathlib import Path
    from burst.train.quick_exit import quick_exit

    out = Path(sys.argv[1])

    def late() -> None:  # a writer still at work when the step returns
        time.sleep(0.3)
        (out / "thread").write_text("done")

    class Teardown:  # finalized only by the interpreter's teardown
        def __init__(self, path: str) -> None:  # (at teardown, globals may be gone)
            self.path, self.os, self.flags = path, os, os.O_CREAT | os.O_WRONLY

        def __del__(self) -> None:
            fd = self.os.open(self.path, self.flags)
            self.os.write(fd, b"ran")
            self.os.close(fd)

    kept = Teardown(str(out / "teardown"))
    threading.Thread(target=late).start()
    pool = ThreadPoolExecutor(1)  # work handed to an executor and not awaited
    pool.submit(lambda: (time.sleep(0.3), (out / "pool").write_text("done")))
    atexit.register(lambda: (out / "atexit").write_text("ran"))
    sys.stdout.write("unflushed, no newline")
    if sys.argv[2] == "control":  # the interpreter's own exit: the probe sees its teardown
        sys.exit(75)
    quick_exit(75)
    """
)


@pytest.mark.parametrize("mode", ["quick", "control", "profiled"])
def test_quick_exit_keeps_what_exit_promises(tmp_path: Path, mode: str) -> None:
    script = tmp_path / "prog.py"
    script.write_text(PROGRAM)
    profile = tmp_path / "prof"
    python = [
        sys.executable,
        *(["-m", "cProfile", "-o", str(profile)] if mode == "profiled" else []),
    ]
    proc = subprocess.run(
        [*python, str(script), str(tmp_path), mode],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == (0 if mode == "profiled" else 75), proc.stderr  # (cProfile's 0)
    assert proc.stdout.startswith("unflushed, no newline")
    assert (tmp_path / "thread").read_text() == "done"
    assert (tmp_path / "pool").read_text() == "done"
    assert (tmp_path / "atexit").read_text() == "ran"
    # the teardown is skipped; a profiler, which writes after the program, gets Python's exit
    assert (tmp_path / "teardown").exists() is (mode != "quick")
    assert profile.exists() is (mode == "profiled")
