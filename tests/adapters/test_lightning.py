"""burst.adapters.lightning with the real Lightning Trainer (a small module, synthetic data):
a real SIGUSR1 mid-run saves step-<global_step>.ckpt into BURST_CHECKPOINT_DIR and stops
(StoppedByNotice out of fit(), exit code 75);
fit(ckpt_path=resume_ckpt_path()) continues from that global step to the end."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore::UserWarning")]


def test_notice_saves_a_ckpt_and_stops_then_resume_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("lightning")
    from lightning_parts import Count, SignalAt, fit

    from burst.adapters.lightning import (
        BurstCallback,
        StoppedByNotice,
        checkpoint_dir,
        resume_ckpt_path,
    )

    out = tmp_path / "ckpt"
    out.mkdir()
    monkeypatch.setenv("BURST_CHECKPOINT_DIR", str(out))
    monkeypatch.delenv("BURST_RESUME_FROM", raising=False)
    assert checkpoint_dir() == out and resume_ckpt_path() is None
    cb = BurstCallback()
    with pytest.raises(StoppedByNotice) as stop:  # out of fit(): the code after it never runs
        fit([SignalAt(4), cb])
    assert cb.stopped_by_notice and stop.value.step == 4 and stop.value.code == 75
    assert sorted(p.name for p in out.iterdir()) == ["step-4.ckpt"]  # no partial left
    ckpt = torch.load(out / "step-4.ckpt", weights_only=False)
    assert ckpt["global_step"] == 4 and "optimizer_states" in ckpt

    monkeypatch.setenv("BURST_RESUME_FROM", str(out / "step-4.ckpt"))
    counted = Count()
    resumed, _ = fit([BurstCallback(), counted], ckpt_path=resume_ckpt_path())
    # continued from the saved step: 6 more optimizer steps to max_steps, starting from the
    # saved weights. Lightning restores weights, optimizer, loops and the global step; a
    # plain (not stateful) DataLoader restarts its epoch, so the batches after the resume
    # are not those of an uninterrupted run (Lightning documents this): no equality here.
    assert resumed.global_step == 10 and counted.steps == [5, 6, 7, 8, 9, 10]
    assert counted.first_weights is not None
    assert torch.equal(counted.first_weights, ckpt["state_dict"]["net.0.weight"])
