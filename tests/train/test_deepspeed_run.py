"""``training.engine: deepspeed``, end to end on CPU (real DeepSpeed, gloo, a world of one):
`burst run examples/deepspeed.yaml --preempt-at-step 7` is preempted by a real SIGTERM after
step 7, saves a full DeepSpeed checkpoint, exits 75, resumes, and ends with the weights of the
same spec run without preemption. Two DeepSpeed runs in all (the first run on a machine also
compiles DeepSpeed's shm op into TORCH_EXTENSIONS_DIR)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DEEPSPEED = REPO / "examples" / "deepspeed.yaml"


@pytest.fixture
def deepspeed_in(tmp_path: Path) -> Path:
    """examples/deepspeed.yaml with its checkpoint store in the test's tmp dir."""
    text = DEEPSPEED.read_text()
    old = "checkpoint_uri: file://runs/checkpoints"
    assert old in text
    p = tmp_path / "deepspeed.yaml"
    p.write_text(text.replace(old, f"checkpoint_uri: file://{tmp_path}/store"))
    return p


def _run(burst_cmd: list[str], spec: Path, run_id: str, runs: Path, *extra: str) -> dict:  # type: ignore[type-arg]
    p = subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", run_id, "--runs-root", str(runs), *extra],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((runs / run_id / "report.json").read_text())  # type: ignore[no-any-return]


@pytest.mark.slow
def test_deepspeed_preempted_at_7_ends_with_the_weights_of_a_run_without(
    tmp_path: Path, deepspeed_in: Path, burst_cmd: list[str]
) -> None:
    runs = tmp_path / "runs"
    plain = _run(burst_cmd, deepspeed_in, "plain", runs)
    pre = _run(burst_cmd, deepspeed_in, "pre", runs, "--preempt-at-step", "7")
    assert plain["status"] == pre["status"] == "succeeded"
    assert len(plain["final_weights_sha256"]) == 64
    assert pre["final_weights_sha256"] == plain["final_weights_sha256"]

    train = json.loads((runs / "pre" / "docs" / "train.json").read_text())
    assert train["preemptions"] == 1 and train["final_step"] == 30
    assert [a["resumed_from"] for a in train["attempts"]] == [0, 7]
    assert [a["preempted"] for a in train["attempts"]] == [True, False]
    first = train["attempts"][0]
    assert first["ended_at_step"] == 7
    assert first["emergency_save"]["tier"] == "full"
    assert first["emergency_save"]["committed"] is True
    assert first["emergency_save"]["committed_step"] == 7
    records = [
        json.loads(line)
        for line in (runs / "pre" / "train-attempts.jsonl").read_text().splitlines()
    ]
    assert [r["engine"] for r in records] == ["deepspeed", "deepspeed"]
    assert [r["outcome"] for r in records] == ["preempted", "done"]
    # DeepSpeed checkpoints are one tier: every committed checkpoint of the run is full
    manifests = sorted((tmp_path / "store" / "pre" / "manifests").glob("*.json"))
    assert manifests and {m.name.split(".")[1] for m in manifests} == {"full"}, manifests
    plain_train = json.loads((runs / "plain" / "docs" / "train.json").read_text())
    assert plain_train["preemptions"] == 0 and len(plain_train["attempts"]) == 1
    assert train["checkpoints"] == plain_train["checkpoints"] + 1  # the emergency save


@pytest.mark.parametrize("stage", ["4", "-1", "two"])
def test_a_bad_zero_stage_is_one_line_naming_the_field(
    tmp_path: Path, deepspeed_in: Path, burst_cmd: list[str], stage: str
) -> None:
    text = deepspeed_in.read_text().replace("zero_stage: 2", f"zero_stage: {stage}")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    p = subprocess.run(
        [*burst_cmd, "validate", str(bad)], capture_output=True, text=True, timeout=120
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "training.zero_stage" in p.stderr
    assert "Traceback" not in p.stderr
