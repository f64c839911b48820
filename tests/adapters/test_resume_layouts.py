"""Real Hugging Face and Lightning programs (tests/adapters/own_prog.py) under the real train
step (tests/preempt/attempts_harness: forked as ``python -m burst.steps.train`` runs it), preempted
by a real notice (SIGTERM to the step) between two periodic saves and resumed:

* the adapter saves at the notice, stops training (the code after ``train()`` / ``fit()`` never
  runs: StoppedByNotice, exit 75), burst commits that save, and the resumed run continues
  from it; the report's ``resumed_from`` is what the framework resumed at;
* Lightning: ``fit(ckpt_path="last")`` unchanged resumes from the notice's save (burst commits
  and restores ``last.ckpt`` with the step's file), and a script with no burst code at all
  resumes from its last periodic save, not from step 0; its checkpoints lie in a
  subdirectory of ``$BURST_CHECKPOINT_DIR``;
* Hugging Face: what the script writes after training (``trainer.save_model()``) is committed
  with the last checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "preempt"))
from attempts_harness import QUICKSTART, committed, load_checkpoint, start_attempt

from burst.errors import EXIT_PREEMPTED
from burst.program.snapshot import parts_of

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.filterwarnings("ignore")]
PROG = Path(__file__).resolve().parent / "own_prog.py"


def spec(tmp: Path, mode: str) -> Path:
    text = QUICKSTART.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store"
    )
    start, end = text.index("training:"), text.index("budget:")
    command = f"[python, {PROG}, {mode}, --after, {tmp / 'after.json'}]"
    training = f"training:\n  command: {command}\n  steps: 10\n  checkpoint:\n    keep_full: 5\n"
    p = tmp / f"{mode}.yaml"
    p.write_text(text[:start] + training + text[end:])
    return p


def names(p: Path, run_id: str, step: int) -> list[str]:
    ref = next(r for r in committed(p, run_id) if r.step == step)
    return [str(d["name"]) for d in parts_of(load_checkpoint(p, run_id, ref))]


def preempt_at_the_gate(p: Path, run_id: str, runs: Path, grace_s: int) -> dict[str, Any]:
    """The first attempt: once step 5 has committed and the program waits at step 7, the
    node's notice (SIGTERM to the step, ``grace_s`` of grace); its record."""
    a = start_attempt(p, run_id, runs, {"BURST_SIGTERM_GRACE_S": str(grace_s)})
    gate = runs / run_id / "program" / "at-gate"
    end = time.monotonic() + 300
    while not (gate.exists() and 5 in [r.step for r in committed(p, run_id)]):
        assert time.monotonic() < end, "the program never reached step 7 with step 5 committed"
        assert a.code is None or a.code == 0
        time.sleep(0.2)
    os.kill(a.pid, signal.SIGTERM)
    assert a.wait(300) == EXIT_PREEMPTED
    rec: dict[str, Any] = a.doc()["attempts"][-1]
    assert rec["preempted"] is True
    return rec


def resume(p: Path, run_id: str, runs: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    b = start_attempt(p, run_id, runs)
    assert b.wait(300) == 0, b.doc().get("error")
    after = json.loads((p.parent / "after.json").read_text())
    return b.doc(), after


def test_hf_saves_at_the_notice_stops_and_resumes_from_it_and_its_final_model_commits(
    tmp_path: Path,
) -> None:
    pytest.importorskip("transformers")
    p, runs = spec(tmp_path, "hf"), tmp_path / "runs"
    rec = preempt_at_the_gate(p, "hf", runs, grace_s=120)
    assert rec["program"]["saved_on_notice"] is True
    assert rec["emergency_save"]["committed_step"] == 7  # saved at the notice, between 5 and 10
    assert not (tmp_path / "after.json").exists()  # the code after train() did not run
    assert [r.step for r in committed(p, "hf")] == [5, 7]

    doc, after = resume(p, "hf", runs)
    assert after["resumed_from"].endswith("/checkpoint-7") and after["steps"][0] == 8
    assert after["final"] == 10
    assert doc["attempts"][-1]["resumed_from"] == 7 and doc["resumed_from"] == 7
    assert doc["final_step"] == 10
    # the last checkpoint and what save_model() wrote after training, committed together
    final = names(p, "hf", 10)
    assert final[0] == "checkpoint-10"
    assert {"model.safetensors", "config.json"} <= set(final), final


def test_lightning_unchanged_ckpt_path_last_resumes_from_the_notices_save(
    tmp_path: Path,
) -> None:
    pytest.importorskip("lightning")
    p, runs = spec(tmp_path, "lightning"), tmp_path / "runs"
    rec = preempt_at_the_gate(p, "pl", runs, grace_s=120)
    assert rec["program"]["saved_on_notice"] is True
    assert rec["emergency_save"]["committed_step"] == 7
    assert not (tmp_path / "after.json").exists()  # the code after fit() did not run
    # each step's files together, in the subdirectory the program saves into: the file of
    # the step and the last.ckpt that ckpt_path="last" opens
    assert names(p, "pl", 5) == ["ckpts/epoch=0-step=5.ckpt", "ckpts/last.ckpt"]
    assert names(p, "pl", 7) == ["ckpts/step-7.ckpt", "ckpts/last.ckpt"]

    doc, after = resume(p, "pl", runs)
    assert after["steps"][0] == 8 and after["final"] == 10  # fit(ckpt_path="last") at 7
    assert doc["attempts"][-1]["resumed_from"] == 7


def test_lightning_with_no_burst_code_resumes_from_its_last_periodic_save(
    tmp_path: Path,
) -> None:
    pytest.importorskip("lightning")
    p, runs = spec(tmp_path, "lightning-plain"), tmp_path / "runs"
    rec = preempt_at_the_gate(p, "plain", runs, grace_s=8)
    assert rec["program"]["saved_on_notice"] is False  # no adapter: it trained on, unsaved
    assert [r.step for r in committed(p, "plain")] == [5]
    assert names(p, "plain", 5) == ["ckpts/epoch=0-step=5.ckpt", "ckpts/last.ckpt"]

    doc, after = resume(p, "plain", runs)
    assert after["steps"][0] == 6 and after["final"] == 10  # from last.ckpt, not from 0
    # no adapter to say it: the step of the framework's own state in what burst restored
    assert doc["attempts"][-1]["resumed_from"] == 5
