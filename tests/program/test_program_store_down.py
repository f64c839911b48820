"""A user's own program (``training.command``) under a checkpoint store that dies for good
(issue 42): the step stops within the save retry window, as the built-in loop does, and exits
4 (``store-down``: an infrastructure fault the pipeline retries), never 2 (bad input) and
never trains on with nothing kept. Real processes: the train step (forked, as
``python -m burst.steps.train`` runs it), its checkpoint worker, a real program that keeps
saving, and a real S3 server on loopback (``rclone serve s3``) stopped for good."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "preempt"))
from attempts_harness import QUICKSTART, committed, start_attempt

from burst.checkpoint.manager import RETRY_ENV
from burst.errors import EXIT_INFRA
from burst.storage.loopback import LoopbackS3

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
SAVER = Path(__file__).resolve().parent / "saver_prog.py"


def _spec(tmp: Path) -> Path:
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", "checkpoint_uri: s3://dying/ckpt"
    )
    start, end = text.index("training:"), text.index("budget:")
    training = f"training:\n  command: [python, {SAVER}]\n  steps: 400\n"
    p = tmp / "spec.yaml"
    p.write_text(text[:start] + training + text[end:])
    return p


def test_a_program_stops_when_the_store_is_down_for_good(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = LoopbackS3(tmp_path / "s3data").start()
    try:
        server.create_bucket("dying")
        for k, v in server.client_env().items():
            monkeypatch.setenv(k, v)
        spec = _spec(tmp_path)
        a = start_attempt(spec, "dead", tmp_path / "runs", {RETRY_ENV: "2"})
        end = time.monotonic() + 120
        while not committed(spec, "dead"):  # the store works: the program's saves commit
            assert time.monotonic() < end, "no checkpoint of the program ever committed"
            time.sleep(0.2)
        server.stop()  # for good, while the program trains and saves on
        # (the program alone would run for two minutes more: the step must not wait for it)
        code = a.wait(110)
        doc = a.doc()
        last = doc["attempts"][-1]
        assert code == EXIT_INFRA, doc.get("error")
        assert last["outcome"] == "store-down", last
        assert "retry window (2s, BURST_CHECKPOINT_RETRY_S)" in doc["error"], doc["error"]
        assert "\n" not in doc["error"]
        # the program was stopped, not left to finish its 400 saves
        assert last["program"]["exit_code"] != 0, last["program"]
    finally:
        server.stop()
