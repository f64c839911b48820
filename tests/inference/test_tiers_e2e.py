"""From the quickstart's run to serving tiers, as docs/inference.md documents it: the train
step (a real run and its store), `burst distill`, `burst serve` with a fault, each a real
process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"
pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _run(*args: str, runs: Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "BURST_RUNS_ROOT": str(runs)}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env
    )


def test_quickstart_run_to_served_tiers(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    train = _run(
        "-m",
        "burst.steps.train",
        "--spec",
        str(QUICKSTART),
        "--run-id",
        "tiers",
        "--runs-root",
        str(runs),
        runs=runs,
    )
    assert train.returncode == 0, train.stderr[-2000:]
    cli = ("-m", "burst.cli.main")
    distill = _run(*cli, "distill", str(QUICKSTART), "--run", "tiers", "--steps", "150", runs=runs)
    assert distill.returncode == 0, distill.stderr[-2000:]
    index = json.loads((runs / "checkpoints" / "tiers" / "tiers" / "index.json").read_text())
    assert [t["name"] for t in index["tiers"]] == ["heavy", "distilled", "distilled-int8"]
    heavy, student, int8 = index["tiers"]
    assert (
        student["size_bytes"] < heavy["size_bytes"] / 5
        and int8["size_bytes"] < student["size_bytes"]
    )
    assert all(t["heldout_loss"] < 1.0 for t in index["tiers"])  # a target variance of ~0.6
    for t in index["tiers"]:  # each tier is a committed checkpoint in the run's store
        store = Path(t["store"].removeprefix("file://"))
        assert (store / t["manifest"]).is_file() and any((store / "chunks").iterdir())
        # ... and a Triton model repository, what deploy/inference's storageUris name
        repo, model = Path(t["triton"].removeprefix("file://")), t["name"].replace("-", "_")
        assert repo == store / "triton"
        assert sorted(p.relative_to(repo).as_posix() for p in repo.rglob("*") if p.is_file()) == [
            f"{model}/1/model.pt",
            f"{model}/config.pbtxt",
        ]
    out = tmp_path / "serve.json"
    serve = _run(
        *cli,
        "serve",
        str(QUICKSTART),
        "--run",
        "tiers",
        "--requests",
        "16",
        "--fault",
        "distilled killed",
        "--json",
        str(out),
        runs=runs,
    )
    assert serve.returncode == 0, serve.stderr[-2000:]
    doc = json.loads(out.read_text())
    assert doc["breaches"] == 0
    assert doc["matrix"]["landed_as_named"] == doc["matrix"]["requests"] == 16, doc["matrix"]
    paths = {r["path"] for r in doc["records"]}
    assert "serve:distilled-int8" not in paths and "serve:heavy" in paths
    # personal data never went to the heavy region, even with the distilled tier dead
    assert all(
        "me-central-1" not in r["sent_to"] for r in doc["records"] if r["data_class"] == "personal"
    )
    assert "landed where the policy names: 16 of 16" in serve.stdout
