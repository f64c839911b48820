"""``training.engine: deepspeed``, end to end on CPU (real DeepSpeed, gloo, a world of one).

`burst run examples/deepspeed.yaml --preempt-at-step 7` is preempted by a real SIGTERM after
step 7, saves a full DeepSpeed checkpoint, exits 75, resumes, and ends with the weights of the
same spec run without preemption. With no time left at the notice (``BURST_SIGTERM_GRACE_S=0``)
the train step saves nothing, exits 75, and the resume from the last committed checkpoint
(step 5) still ends with those weights. Three DeepSpeed runs in all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

REPO = Path(__file__).resolve().parents[2]
DEEPSPEED = REPO / "examples" / "deepspeed.yaml"


def deepspeed_spec(tmp: Path) -> Path:
    """examples/deepspeed.yaml with its checkpoint store in ``tmp``."""
    text = DEEPSPEED.read_text()
    old = "checkpoint_uri: file://checkpoints"
    assert old in text
    p = tmp / "deepspeed.yaml"
    p.write_text(text.replace(old, f"checkpoint_uri: file://{tmp}/store"))
    return p


def burst_run(spec: Path, run_id: str, runs: Path, *extra: str) -> dict[str, Any]:
    p = subprocess.run(
        [
            *(sys.executable, "-m", "burst.cli.main", "run", str(spec)),
            *("--run-id", run_id, "--runs-root", str(runs), *extra),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    return json.loads((runs / run_id / "report.json").read_text())  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The spec, and the report of a run of it without preemption."""
    tmp = tmp_path_factory.mktemp("ds")
    spec = deepspeed_spec(tmp)
    return spec, burst_run(spec, "plain", tmp / "runs")


@pytest.mark.slow
def test_deepspeed_preempted_at_7_ends_with_the_weights_of_a_run_without(
    plain: tuple[Path, dict[str, Any]],
) -> None:
    spec, report = plain
    runs = spec.parent / "runs"
    pre = burst_run(spec, "pre", runs, "--preempt-at-step", "7")
    assert report["status"] == pre["status"] == "succeeded"
    assert len(report["final_weights_sha256"]) == 64
    assert pre["final_weights_sha256"] == report["final_weights_sha256"]

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
    manifests = sorted((spec.parent / "store" / "pre" / "manifests").glob("*.json"))
    assert manifests and {m.name.split(".")[1] for m in manifests} == {"full"}, manifests
    plain_train = json.loads((runs / "plain" / "docs" / "train.json").read_text())
    assert plain_train["preemptions"] == 0 and len(plain_train["attempts"]) == 1
    assert train["checkpoints"] == plain_train["checkpoints"] + 1  # the emergency save
    # the engine's local files went with the attempt: the resume read the store
    assert not list((runs / "pre").glob("deepspeed-*"))


def train_attempt(spec: Path, runs: Path, out: Path, **env: str) -> tuple[int, dict[str, Any]]:
    p = subprocess.run(
        [
            *(
                sys.executable,
                "-m",
                "burst.steps.train",
                "--spec",
                str(spec),
                "--run-id",
                "no-time",
            ),
            *("--runs-root", str(runs), "--out", str(out)),
        ],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
        env={**os.environ, "BURST_PREEMPT_WATCHERS": "none", **env},
    )
    return p.returncode, json.loads(out.read_text())


@pytest.mark.slow
def test_deepspeed_with_no_time_left_relies_on_the_last_committed_and_ends_the_same(
    plain: tuple[Path, dict[str, Any]],
) -> None:
    spec, report = plain
    runs = spec.parent / "runs"
    code, doc = train_attempt(
        spec, runs, spec.parent / "a1.json", BURST_PREEMPT_AT_STEPS="7", BURST_SIGTERM_GRACE_S="0"
    )
    assert code == 75, doc
    assert doc["final_step"] == 7 and doc["preemptions"] == 1
    for key in ("checkpoints", "attempts", "checkpoint_interval", "cost_usd"):
        assert key in doc, key
    emergency = doc["attempts"][0]["emergency_save"]
    assert emergency["tier"] == "none", emergency
    # step 5's routine save is committed, or (a loaded machine: no time left to wait for
    # it) still in flight, left to the writer to commit as the attempt exits: either way the
    # next attempt resumes from it
    assert emergency["last_committed"] == {"step": 5, "tier": "full"} or (
        emergency.get("last_committed") is None and emergency.get("in_flight_step") == 5
    ), emergency
    code, doc = train_attempt(spec, runs, spec.parent / "a2.json", BURST_PREEMPT_AT_STEPS="7")
    assert code == 0, doc
    assert doc["resumed_from"] == 5 and doc["final_step"] == 30
    assert doc["final_weights_sha256"] == report["final_weights_sha256"]


@pytest.mark.parametrize("stage", ["4", "-1", "two"])
def test_a_bad_zero_stage_is_one_line_naming_the_field(tmp_path: Path, stage: str) -> None:
    text = deepspeed_spec(tmp_path).read_text()
    assert "zero_stage: 2" in text
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("zero_stage: 2", f"zero_stage: {stage}"))
    p = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "validate", str(bad)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert p.returncode == 2, p.stdout + p.stderr
    assert "training.zero_stage" in p.stderr
    assert "Traceback" not in p.stderr
