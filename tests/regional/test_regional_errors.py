"""A regional run's mistakes and broken remotes: one line, a documented exit code, no hang."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.regional import first_local_steps_for, local_steps_for, plan_regional_sync
from burst.plan.workload import estimate
from burst.regional.runtime import RoleConfig
from burst.regional.site import RegionSite
from burst.spec import load_spec
from burst.storage.local import LocalStore

from .regional_specs import REPO, TWO, regional_spec

BurstCli = Callable[..., subprocess.CompletedProcess[str]]


def test_local_steps_from_the_spec(tmp_path: Path) -> None:
    job = load_spec(regional_spec(tmp_path, TWO, local_steps=4))
    assert local_steps_for(job) == (4, "training.regional_sync.local_steps")


def test_local_steps_null_is_the_planners_pick(tmp_path: Path) -> None:
    """``local_steps: null``: the planner's H for the spec's step time (step_seconds 0.6 s:
    a round's sync over the cross-continent link, about 0.2 s, stays under 10 % of H x 0.6 s
    from H = 4 on), the same figure ``burst plan`` shows."""
    job = load_spec(regional_spec(tmp_path, TWO, local_steps=None, step_seconds=0.6))
    h, basis = local_steps_for(job)
    cat = load_catalog()
    planned = plan_regional_sync(job, cat, estimate(job, cat), "aws")
    assert planned is not None and h == planned["local_steps"] == 4
    assert basis.startswith("planner: smallest H with sync <= 0.1 x H x 0.6 s"), basis
    assert "step_seconds 0.6" in basis


def test_local_steps_null_is_capped_at_the_run(tmp_path: Path) -> None:
    """A planner's H above ``training.steps`` is one round of every step, and says so."""
    job = load_spec(regional_spec(tmp_path, TWO, local_steps=None, step_seconds=0.05))
    h, basis = local_steps_for(job)
    assert h == 12 and "exceeds training.steps" in basis, basis


def test_the_round_schedule_is_the_spec_s_or_the_planner_s(tmp_path: Path) -> None:
    """Issue 31: ``first_local_steps: null`` takes the planner's schedule (what the provision
    step writes into the role configs when no plan document is given): constant when H is the
    planner's own, the shortest round within the sync fraction (4 here) below a longer H."""
    planned = load_spec(regional_spec(tmp_path, TWO, local_steps=None, step_seconds=0.6))
    first, basis = first_local_steps_for(planned)
    assert first is None and basis.startswith("planner: constant"), basis
    longer = load_spec(regional_spec(tmp_path, TWO, local_steps=8, step_seconds=0.6))
    first, basis = first_local_steps_for(longer)
    assert first == 4 and basis.startswith("planner: from the shortest round"), basis
    given = regional_spec(tmp_path, TWO, local_steps=8, step_seconds=0.6)
    given.write_text(
        given.read_text().replace(
            "    local_steps: 8\n", "    local_steps: 8\n    first_local_steps: 8\n"
        )
    )
    assert first_local_steps_for(load_spec(given)) == (
        8,
        "training.regional_sync.first_local_steps",
    )


def test_burst_run_refuses_the_train_graphs_fault_options(
    tmp_path: Path, burst_cli: BurstCli
) -> None:
    spec = regional_spec(tmp_path, TWO)
    proc = burst_cli(
        ["run", str(spec), "--runs-root", str(tmp_path / "runs"), "--fail-at", "train"]
    )
    assert proc.returncode == 2, proc.stderr
    assert "regional-sync" in proc.stderr and "Traceback" not in proc.stderr


def _step(
    tmp_path: Path, step: str, region: str, wait_limit_s: float
) -> subprocess.CompletedProcess[str]:
    """``python -m burst.steps.<step>`` as a region's branch runs it (the step contract, the
    region's stack id, ``BURST_REGION``), with the site a local run gives the region's pods:
    directory stores, no link time."""
    spec = regional_spec(tmp_path, TWO)
    site = RegionSite(
        region=region,
        region_store=LocalStore(tmp_path / region).spec(),
        exchange_store=LocalStore(tmp_path / "exchange").spec(),
        link_log=str(tmp_path / "links.jsonl"),
        time_scale=0.0,
        state_root=str(tmp_path / "scratch"),
        results_dir=str(tmp_path),
        wait_limit_s=wait_limit_s,
    )
    site_file = tmp_path / f"site-{region}.json"
    site_file.write_text(site.to_json())
    args = [sys.executable, "-m", f"burst.steps.{step}", "--spec", str(spec)]
    args += ["--run-id", f"wf-{region}", "--runs-root", str(tmp_path / "runs")]
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(REPO),
        "BURST_REGION": region,
        "BURST_REGION_SITE": str(site_file),
    }
    return subprocess.run(
        args, capture_output=True, text=True, cwd=REPO, env=env, timeout=120, check=False
    )


@pytest.mark.e2e
def test_worker_without_its_shard_is_bad_input(tmp_path: Path) -> None:
    """A region store with no shard: the region's train step exits 2, one line naming the key
    and the store."""
    # (the shard is read first, before the worker waits for a global checkpoint)
    proc = _step(tmp_path, "train", "me-central-1", wait_limit_s=5.0)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst train:")]
    assert len(errors) == 1 and "no shard at shard/shard.npz" in errors[0], proc.stderr
    assert str(tmp_path / "me-central-1") in errors[0]
    assert "Traceback" not in proc.stderr
    # the worker's view of the run, derived by the step, beside its documents
    cfg = RoleConfig.load(tmp_path / "runs" / "wf-me-central-1" / "worker.config.json")
    assert cfg.role == "worker" and cfg.run_dir == str(tmp_path / "runs" / "wf")


@pytest.mark.e2e
def test_aggregator_without_deltas_gives_up_as_infrastructure(tmp_path: Path) -> None:
    """No worker ever delivers: after its wait limit the aggregate step exits 4 (an
    infrastructure fault, not bad input), one line naming the round."""
    proc = _step(tmp_path, "aggregate", "ap-southeast-1", wait_limit_s=1.0)
    assert proc.returncode == 4, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst aggregate:")]
    assert len(errors) == 1 and "no usable delta for round 0" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    # round 0 (the initial weights) was committed before it gave up: a restart resumes there
    assert (tmp_path / "exchange" / "global" / "manifests" / f"{0:012d}.weights.json").exists()


def test_the_aggregator_runs_in_the_aggregation_region_only(tmp_path: Path) -> None:
    proc = _step(tmp_path, "aggregate", "me-central-1", wait_limit_s=1.0)
    assert proc.returncode == 2, proc.stderr
    assert "the aggregator runs in ap-southeast-1, not in me-central-1" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_burst_run_refuses_a_region_the_preflight_does_not_allow(
    tmp_path: Path, burst_cli: BurstCli
) -> None:
    """Personal data: me-central-1's model updates would cross to ap-southeast-1 and the
    shipped facts say nothing about model updates (review, never allow): exit 3, one line
    naming the region, the decision record written, nothing provisioned."""
    spec = regional_spec(tmp_path, TWO)
    spec.write_text(
        spec.read_text().replace("classification: internal", "classification: personal")
    )
    root = tmp_path / "runs"
    proc = burst_cli(["run", str(spec), "--runs-root", str(root), "--run-id", "refused"])
    assert proc.returncode == 3, proc.stderr
    report = json.loads((root / "refused" / "report.json").read_text())
    assert report["status"] == "failed" and report["exit_code"] == 3
    failure = report["failure"]
    assert failure["step"] == "preflight" and failure["exit_code"] == 3, failure
    assert "region me-central-1 is not allowed" in failure["message"], failure
    assert "XFER-MODEL-UPDATE" in (root / "refused" / "preflight.json").read_text()
    regional = report["regional"]
    assert regional["provisioned"] == [] and regional["rounds_completed"] == 0
    # no stack: a region's workspace is <run>-<region> (burst-regional's stack id)
    assert not list(root.glob("refused-*/terraform/terraform.tfstate"))
    assert not [p for p in (root / "refused" / "stores").iterdir()]  # no store
    assert "Traceback" not in proc.stderr
