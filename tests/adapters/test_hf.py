"""burst.adapters.hf with the real transformers Trainer (a 2-layer GPT-2 made from a config,
synthetic tokens): a real SIGUSR1 mid-run saves checkpoint-<step> and stops (StoppedByNotice
out of train(), exit code 75); a Trainer resumed
from BURST_RESUME_FROM continues from that step and ends with the weights of an
uninterrupted run (measured here on CPU; the Trainer restores model, optimizer, scheduler,
RNG states and its place in the data)."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import torch

from burst.adapters.notice import NoticeWatch, notice_signal
from burst.errors import BadInputError
from burst.program.contract import Notice, write_notice

pytestmark = pytest.mark.slow


def test_notice_saves_now_stops_and_resume_matches_an_uninterrupted_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("transformers")
    from hf_parts import SignalAt, trainer

    from burst.adapters.hf import (
        BurstCallback,
        StoppedByNotice,
        output_dir,
        resume_from_checkpoint,
    )

    out = tmp_path / "ckpt"
    monkeypatch.setenv("BURST_CHECKPOINT_DIR", str(out))
    monkeypatch.delenv("BURST_RESUME_FROM", raising=False)
    assert output_dir() == str(out) and resume_from_checkpoint() is None
    burst_cb = BurstCallback()
    first = trainer(out, [SignalAt(4), burst_cb])
    with pytest.raises(StoppedByNotice) as stop:  # out of train(): the code after it never runs
        first.train(resume_from_checkpoint=resume_from_checkpoint())
    assert stop.value.code == 75 and stop.value.step == 4
    assert burst_cb.stopped_by_notice and burst_cb.saved_step == 4
    assert first.state.global_step == 4  # stopped at the step of the notice
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint-3", "checkpoint-4"]
    state = json.loads((out / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4
    assert signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None, signal.default_int_handler)

    monkeypatch.setenv("BURST_RESUME_FROM", str(out))  # the directory: the newest in it
    assert resume_from_checkpoint() == str(out / "checkpoint-4")
    resumed = trainer(out, [BurstCallback()])
    resumed.train(resume_from_checkpoint=resume_from_checkpoint())
    assert resumed.state.global_step == 8

    straight = trainer(tmp_path / "straight", [])
    straight.train()
    for (name, a), b in zip(
        resumed.model.state_dict().items(), straight.model.state_dict().values(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_notice_file_alone_is_a_notice(tmp_path: Path) -> None:
    path = tmp_path / "notice.json"
    watch = NoticeWatch(poll_s=0.0, environ={"BURST_NOTICE_FILE": str(path)})
    assert not watch.arrived()
    write_notice(path, Notice(deadline_unix=123.0, reason="spot"))
    assert watch.arrived() and watch.notice == Notice(123.0, "spot")


def test_notice_signal_names(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("transformers")
    from burst.adapters.hf import resume_from_checkpoint

    assert notice_signal({}) == signal.SIGUSR1
    assert notice_signal({"BURST_NOTICE_SIGNAL": "usr2"}) == signal.SIGUSR2
    with pytest.raises(BadInputError, match="BURST_NOTICE_SIGNAL='SIGNOPE' is not a signal"):
        notice_signal({"BURST_NOTICE_SIGNAL": "SIGNOPE"})
    monkeypatch.setenv("BURST_RESUME_FROM", "/nonexistent/ckpt")
    with pytest.raises(BadInputError, match="no such file"):
        resume_from_checkpoint()
