"""Infrastructure faults at the end of training never discard finished work (issue 16).

Real processes throughout: the train step (forked, as ``python -m burst.steps.train`` runs), its
checkpoint worker (SIGKILLed by the fault points of ``burst.faults``), and a real
S3 server on loopback (``rclone serve s3``) stopped and started again across the final save.
Each trial ends with the newest step committed, or with exit 4, which the pipeline's retry
expression retries, and the store holds what the report says.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from attempts_harness import REPO, committed, run_attempt, start_attempt, write_spec

from burst import faults
from burst.checkpoint.manager import RETRY_ENV
from burst.errors import EXIT_INFRA
from burst.runner import expr
from burst.storage.loopback import LoopbackS3

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS = 10  # saves at 5 (weights) and 10 (full, the final one)


def _fault(tmp: Path, point: str) -> dict[str, str]:
    return {"BURST_CHECKPOINT_FAULT": point, faults.ONCE_ENV: str(tmp / "fired")}


@pytest.mark.parametrize("point", [f"before-manifest@{STEPS}", "worker-start"])
def test_worker_killed_during_the_final_save_or_its_start_up(tmp_path: Path, point: str) -> None:
    spec = write_spec(tmp_path, steps=STEPS)
    a = run_attempt(spec, "w", tmp_path / "runs", _fault(tmp_path, point))
    assert (tmp_path / "fired").exists(), "the fault never fired: the test proved nothing"
    assert a.code == 0
    assert [r.step for r in committed(spec, "w")][-1] == STEPS
    doc = a.doc()
    assert doc["final_step"] == STEPS


def _s3_spec(tmp: Path, endpoint_bucket: str) -> Path:
    local = write_spec(tmp, steps=STEPS, name="local.yaml")
    spec = tmp / "s3.yaml"
    spec.write_text(
        local.read_text().replace(
            f"checkpoint_uri: file://{tmp}/store", f"checkpoint_uri: s3://{endpoint_bucket}/ckpt"
        )
    )
    return spec


def _wait_for(path: Path, timeout: float = 120.0) -> None:
    end = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_store_down_for_seconds_across_the_final_save(tmp_path: Path) -> None:
    server = LoopbackS3(tmp_path / "s3data").start()
    try:
        server.create_bucket("outage")
        spec = _s3_spec(tmp_path, "outage")
        env = {
            **server.client_env(),
            **_fault(tmp_path, f"before-manifest@{STEPS}"),
            faults.ACTION_ENV: f"pause:{tmp_path}",
            RETRY_ENV: "120",
        }
        a = start_attempt(spec, "o", tmp_path / "runs", env)
        _wait_for(tmp_path / "paused")  # the final save is about to commit: the store goes
        port = server.port
        server.stop()
        (tmp_path / "resume").touch()
        time.sleep(12)  # several of the client's connect timeouts and retries
        server.start(port=port)
        assert a.wait(300) == 0
        refs = [r.step for r in _committed_s3(spec, server)]
        assert refs[-1] == STEPS
        assert a.doc()["final_step"] == STEPS
    finally:
        server.stop()


def _committed_s3(spec: Path, server: LoopbackS3) -> list:  # type: ignore[type-arg]
    import os

    saved = {k: os.environ.get(k) for k in server.client_env()}
    os.environ.update(server.client_env())
    try:
        text = spec.read_text()
        run = "o" if "outage" in text else "gone" if "s3://gone" in text else "dead"
        return committed(spec, run)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def retried_by_the_pipeline(code: int) -> bool:
    """Would the compiled pipeline's train retry expression retry this exit code?"""
    doc = yaml.safe_load((REPO / "burst/pipelines/compiled/burst-train.yaml").read_text())
    train = next(t for t in doc["spec"]["templates"] if t["name"] == "train")
    rs = train["retryStrategy"]
    assert rs["retryPolicy"] == "Always"
    env = {"lastRetry": {"exitCode": str(code), "status": "Failed", "message": ""}}
    return bool(expr.evaluate(expr.parse(rs["expression"]), env))


def test_permanently_dead_store_is_exit_4_and_retried(tmp_path: Path) -> None:
    server = LoopbackS3(tmp_path / "s3data").start()
    try:
        server.create_bucket("deadstore")
        spec = _s3_spec(tmp_path, "deadstore")
        env = {
            **server.client_env(),
            **_fault(tmp_path, f"before-manifest@{STEPS}"),
            faults.ACTION_ENV: f"pause:{tmp_path}",
            RETRY_ENV: "3",
        }
        a = start_attempt(spec, "dead", tmp_path / "runs", env)
        _wait_for(tmp_path / "paused")
        server.stop()  # for good
        (tmp_path / "resume").touch()
        assert a.wait(300) == EXIT_INFRA
        assert retried_by_the_pipeline(EXIT_INFRA)
        assert not retried_by_the_pipeline(2)  # bad input is not retried
    finally:
        server.stop()


def test_a_store_that_stays_down_stops_training_within_the_retry_window(tmp_path: Path) -> None:
    """Issue 25 bug 7: with the store down for good, training ran on to its last step and
    only then gave up after the save retry window (paid GPU time for work that could not be
    saved). Now it stops once saves have failed for the retry window, the committed work
    intact and the reason in the train document. (Fails on the code before: the attempt ran
    to its last step and wrote no document.)"""
    server = LoopbackS3(tmp_path / "s3data").start()
    steps = 5000  # paced: far longer than the store's failure and the window together
    try:
        server.create_bucket("gone")
        local = write_spec(tmp_path, steps=steps, interval=5, full_every=1, name="local.yaml")
        spec = tmp_path / "s3.yaml"
        spec.write_text(
            local.read_text().replace(
                f"checkpoint_uri: file://{tmp_path}/store", "checkpoint_uri: s3://gone/ckpt"
            )
        )
        env = {
            **server.client_env(),
            **_fault(tmp_path, "before-manifest@10"),
            faults.ACTION_ENV: f"pause:{tmp_path}",
            RETRY_ENV: "2",
            "BURST_STEP_PACE_S": "0.01",
        }
        a = start_attempt(spec, "gone", tmp_path / "runs", env)
        _wait_for(tmp_path / "paused")  # step 5 committed; the save of step 10 under way
        port = server.port
        server.stop()  # for good (while training)
        (tmp_path / "resume").touch()
        assert a.wait(600) == EXIT_INFRA
        assert retried_by_the_pipeline(EXIT_INFRA)
        doc = a.doc()
        last = doc["attempts"][-1]
        assert last["outcome"] == "store-down", last
        assert 10 <= doc["final_step"] < steps, doc["final_step"]
        assert "retry window" in doc["error"] and "step 5 (full)" in doc["error"], doc["error"]
        server.start(port=port)  # back: what was committed is intact
        refs = [r.step for r in _committed_s3(spec, server)]
        assert refs == [5]
    finally:
        server.stop()
