"""Structured logs: JSON lines with run id and step on every record; readable in a terminal."""

from __future__ import annotations

import io
import json
import logging

import pytest

from burst.obs import events as ev
from burst.obs.logs import setup_logging


@pytest.fixture(autouse=True)
def _restore_root_logger() -> object:
    root = logging.getLogger()
    saved, level = list(root.handlers), root.level
    yield
    root.handlers[:] = saved
    root.setLevel(level)


def test_json_lines_carry_run_id_and_step_on_every_record() -> None:
    buf = io.StringIO()
    setup_logging(logging.DEBUG, json_lines=True, run_id="r-7", step="train", stream=buf)
    logging.getLogger("burst.train.loop").info("step %d of %d", 3, 30)
    logging.getLogger("burst.checkpoint").debug("staged")
    ev.emit(logging.getLogger("burst.preempt"), ev.PREEMPTION, train_step=7, source="sigterm")
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("x").exception("failed")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 4
    docs = [json.loads(line) for line in lines]
    for d in docs:
        assert d["run_id"] == "r-7"
        assert d["step"] == "train"
        assert d["ts"].endswith("Z")
    assert docs[0]["msg"] == "step 3 of 30"
    assert docs[2]["event"] == "preemption"
    assert docs[2]["train_step"] == 7
    assert "ValueError: boom" in docs[3]["exc"]


def test_run_id_and_step_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURST_RUN_ID", "env-run")
    monkeypatch.setenv("BURST_STEP", "provision")
    monkeypatch.setenv("BURST_LOG_JSON", "1")
    buf = io.StringIO()
    setup_logging(logging.INFO, stream=buf)
    logging.getLogger("burst.infra").info("applying")
    doc = json.loads(buf.getvalue())
    assert (doc["run_id"], doc["step"], doc["msg"]) == ("env-run", "provision", "applying")


def test_human_lines_in_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BURST_LOG_JSON", raising=False)
    buf = io.StringIO()
    setup_logging(logging.INFO, run_id="r-7", step="train", stream=buf)
    ev.emit(logging.getLogger("burst.checkpoint"), ev.CHECKPOINT, train_step=10, tier="full")
    line = buf.getvalue().strip()
    assert not line.startswith("{")
    assert "[train]" in line
    assert "checkpoint.committed train_step=10 tier=full" in line
