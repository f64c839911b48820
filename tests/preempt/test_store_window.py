"""One retry window for a store that dies near the end of training (issue 46).

The save retry window (``BURST_CHECKPOINT_RETRY_S``) is one budget from the store's first
failure: the save in flight when the store died and the final save share it. Before, the
final save opened a window of its own after the routine save's had run (744 s from the
store's death to exit 4 where 300 s were promised). Real processes: the train step (forked,
as ``python -m burst.steps.train``), its checkpoint worker, and a real S3 server on loopback
(``rclone serve s3``) stopped for good while the routine save of step 5 is under way.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from attempts_harness import committed, start_attempt, write_spec

from burst import faults
from burst.checkpoint.manager import RETRY_ENV
from burst.errors import EXIT_INFRA
from burst.storage.loopback import LoopbackS3

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 10  # saves at 5 (weights, the routine one) and 10 (full, the final one)


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_the_final_save_shares_the_window_of_the_save_the_store_died_under(
    tmp_path: Path,
) -> None:
    server = LoopbackS3(tmp_path / "s3data").start()
    try:
        server.create_bucket("dying")
        local = write_spec(tmp_path, steps=STEPS, name="local.yaml")
        spec = tmp_path / "s3.yaml"
        spec.write_text(
            local.read_text().replace(
                f"checkpoint_uri: file://{tmp_path}/store", "checkpoint_uri: s3://dying/ckpt"
            )
        )
        env = {
            **server.client_env(),
            "BURST_CHECKPOINT_FAULT": "before-manifest@5",
            faults.ONCE_ENV: str(tmp_path / "fired"),
            faults.ACTION_ENV: f"pause:{tmp_path}",
            RETRY_ENV: "3",
        }
        a = start_attempt(spec, "dying", tmp_path / "runs", env)
        _wait_for(tmp_path / "paused")  # the routine save of step 5 is about to commit
        server.stop()  # for good, near the end of training
        (tmp_path / "resume").touch()
        assert a.wait(600) == EXIT_INFRA
        doc = a.doc()
        last = doc["attempts"][-1]
        # the store is down (exit 4, retried by the pipeline), not a failed run or a lost save
        assert last["outcome"] == "store-down", last
        # one window, opened by the first failure (the routine save of step 5), spent before
        # the final save could open another
        assert "retry window (3s, BURST_CHECKPOINT_RETRY_S)" in doc["error"], doc["error"]
        assert "from its first failure (the save of step 5" in doc["error"], doc["error"]
        assert "final checkpoint (step 10) did not commit" in doc["error"], doc["error"]
        server.start()  # nothing committed since the store died: the store holds no step 5
        saved = {**server.client_env()}
        with pytest.MonkeyPatch.context() as mp:
            for k, v in saved.items():
                mp.setenv(k, v)
            assert [r.step for r in committed(spec, "dying")] == []
    finally:
        server.stop()
