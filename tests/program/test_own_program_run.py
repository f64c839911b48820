"""`burst run examples/own-program-torchrun.yaml`: a plain torchrun script (2 ranks, gloo),
preempted mid-run by a notice, requeued and resumed to completion; it continued from the step
it saved on the notice, and its final weights equal an uninterrupted run's (the same script
under torchrun alone)."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from burst.spec import load_spec
from burst.train.checkpoints import RunCheckpoints

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "own-program-torchrun.yaml"
SCRIPT = REPO / "examples" / "programs" / "torchrun_train.py"
# Steps not paced: the notice at the program's step 6 is no timer (the step waits in burst's
# optimizer hook, burst.preempt.program_steps, until the notice is sent), so the save is at 6
# however loaded the machine.
ARGS = ["--steps", "20", "--save-every", "4", "--step-seconds", "0"]


def final_state(spec: Path, run_id: str) -> tuple[int, dict[str, torch.Tensor]]:
    store = RunCheckpoints(load_spec(spec), run_id)
    try:
        ref = store.latest()
        assert ref is not None
        doc = store.load(ref)["burst_program"]
    finally:
        store.close()
    ckpt = torch.load(io.BytesIO(doc["files"][0].tobytes()), weights_only=True)
    return ref.step, ckpt["model"]


def test_preempted_mid_run_resumes_from_its_save_to_the_same_weights(
    tmp_path: Path, burst_cmd: list[str]
) -> None:
    text = EXAMPLE.read_text().replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp_path}/store"
    )
    args = ", ".join(f'"{a}"' for a in ARGS)
    text, n = re.subn(
        r"(?m)^  command: \[examples/programs/torchrun_train.py, .*\]$",
        f"  command: [examples/programs/torchrun_train.py, {args}]",
        text,
    )
    assert n == 1
    text = re.sub(r"(?m)^  steps: \d+$", "  steps: 20", text)
    spec = tmp_path / "own.yaml"
    spec.write_text(text)
    env = {
        **os.environ,
        "BURST_RUNS_ROOT": str(tmp_path / "runs"),
        "BURST_PREEMPT_AT_STEPS": "6",  # a notice at the program's step 6, between saves 4 and 8
    }
    proc = subprocess.run(
        [*burst_cmd, "run", str(spec), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    import json

    report = json.loads(proc.stdout)
    assert report["status"] == "succeeded"
    run_id = report["run_id"]
    train = json.loads((tmp_path / "runs" / run_id / "docs" / "train.json").read_text())
    first, second = train["attempts"]
    assert first["preempted"] and first["outcome"] == "preempted"
    assert first["program"]["saved_on_notice"] is True
    saved = first["emergency_save"]["committed_step"]
    assert first["emergency_save"]["committed"] is True and saved == 6
    # both ranks' handlers ran: the notice reached torchrun's workers, not its agent
    assert len(first["program"]["notified"]) == 2
    # the resumed attempt started from the checkpoint saved on the notice: no committed work lost
    assert second["resumed_from"] == saved and second["outcome"] == "done"
    assert train["final_step"] == 20 and train["preemptions"] == 1
    shown = report["attempts"][0]["program"]  # the report carries what the program did
    assert shown["saved_on_notice"] is True and shown["lost_steps"] == 0
    step, weights = final_state(spec, run_id)
    assert step == 20

    # the same script, uninterrupted, under torchrun alone
    out = tmp_path / "alone"
    subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         str(SCRIPT), *ARGS[:4], "--out", str(out)],
        check=True, capture_output=True, timeout=300,
        env={k: v for k, v in os.environ.items() if not k.startswith("BURST_")},
    )  # fmt: skip
    alone = torch.load(out / "ckpt-000020.pt", weights_only=True)["model"]
    assert alone.keys() == weights.keys()
    for k in alone:
        assert torch.equal(alone[k], weights[k]), k
