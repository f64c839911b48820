"""Issue 44: an emergency save never runs past the notice. At the deadline, what is committed
is what counts: a save still in flight then (its writer held, the process gone) must not
commit afterwards, or a requeued attempt would find a checkpoint that appeared after the node
was gone.

Real processes and a real store: the train step (forked, as ``python -m burst.steps.train``
runs), its checkpoint worker, a loopback S3 server. The worker is held before the manifest of
step 10 (the named fault point ``before-manifest@10``, ``pause``), SIGTERM brings a 4 s
notice, the attempt exits 75 with what it chose recorded; the held worker is let go only once
the notice's deadline has passed. No wall-clock time is asserted: the test waits for the
deadline, then asserts what was committed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

import pytest
from attempts_harness import committed, start_attempt, write_spec

from burst import faults
from burst.errors import EXIT_PREEMPTED
from burst.storage.loopback import LoopbackS3

pytestmark = [pytest.mark.e2e]

GRACE_S = 4.0


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def _gone(pid: int, timeout: float = 120.0) -> bool:
    """True once ``pid`` has exited (gone, or a zombie nobody reaps here)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            if "State:\tZ" in Path(f"/proc/{pid}/status").read_text():
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def test_a_save_in_flight_at_the_deadline_never_commits_after_it(tmp_path: Path) -> None:
    server = LoopbackS3(tmp_path / "s3data").start()
    writer: int | None = None
    saved = {k: os.environ.get(k) for k in server.client_env()}
    try:
        server.create_bucket("notice")
        local = write_spec(tmp_path, steps=30, interval=5, full_every=1, name="local.yaml")
        spec = tmp_path / "s3.yaml"
        spec.write_text(
            local.read_text().replace(
                f"checkpoint_uri: file://{tmp_path}/store", "checkpoint_uri: s3://notice/ckpt"
            )
        )
        hold = tmp_path / "hold"
        hold.mkdir()
        env = {
            **server.client_env(),
            "BURST_CHECKPOINT_FAULT": "before-manifest@10",
            faults.ONCE_ENV: str(tmp_path / "fired"),
            faults.ACTION_ENV: f"pause:{hold}",
            "BURST_SIGTERM_GRACE_S": str(GRACE_S),
        }
        a = start_attempt(spec, "deadline", tmp_path / "runs", env)
        _wait_for(hold / "paused")  # step 10's save is held before its manifest
        writer = int((hold / "paused").read_text())
        assert a.wait_until_watching()
        os.kill(a.pid, signal.SIGTERM)
        assert a.wait(120) == EXIT_PREEMPTED
        att = a.doc()["attempts"][-1]
        deadline = att["notice"]["deadline"]
        emergency = att["emergency_save"]
        # the choice and why are recorded; nothing it chose committed while 10 was held
        assert emergency["tier"] in ("full", "weights", "none") and emergency["reason"]
        assert emergency.get("committed") is not True, emergency
        assert emergency["in_flight_step"] == 10, emergency
        assert emergency["last_committed"] == {"step": 5, "tier": "full"}
        assert att["recovery_source"] == "control_plane"
        # the deadline passes with the save still held; then its writer goes on
        while time.time() <= deadline:
            time.sleep(0.05)
        (hold / "resume").touch()
        assert _gone(writer), "the held checkpoint worker never finished"
        writer = None
        os.environ.update(server.client_env())
        refs = committed(spec, "deadline")
        # step 10 was not committed by the deadline: it never is
        assert [(r.step, r.tier) for r in refs] == [(5, "full")]
    finally:
        if writer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(writer, signal.SIGKILL)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()
