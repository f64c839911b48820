"""A regional run's mistakes and broken remotes: one line, a documented exit code, no hang."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.regional import (
    first_local_steps_for,
    local_steps_for,
    plan_regional_sync,
    run_links,
)
from burst.plan.workload import estimate
from burst.regional.runtime import RoleConfig
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


def _config(tmp_path: Path, role: str, region: str, **kw: object) -> Path:
    spec = regional_spec(tmp_path, TWO)
    job = load_spec(spec)
    exchange = LocalStore(tmp_path / "exchange")
    own = LocalStore(tmp_path / region)
    cfg = RoleConfig(
        spec=str(spec),
        role=role,
        region=region,
        aggregation_region="ap-southeast-1",
        regions=tuple(TWO),
        local_steps=4,
        rounds=3,
        region_store=own.spec() if role == "worker" else None,
        exchange_store=exchange.spec(),
        links=tuple(run_links(job, list(TWO))),
        link_log=str(tmp_path / "links.jsonl"),
        time_scale=0.0,
        state_dir=str(tmp_path / "scratch"),
        **kw,  # type: ignore[arg-type]
    )
    path = tmp_path / f"{role}.json"
    path.write_text(cfg.to_json())
    return path


def _role(module: str, config: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, "--config", str(config)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
        check=False,
    )


@pytest.mark.e2e
def test_worker_without_its_shard_is_bad_input(tmp_path: Path) -> None:
    """A region store with no shard: exit 2, one line naming the key and the store."""
    config = _config(tmp_path, "worker", "me-central-1", wait_limit_s=5.0)
    # (the shard is read first, before the worker waits for a global checkpoint)
    proc = _role("burst.steps.regional_worker", config)
    assert proc.returncode == 2, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst regional worker:")]
    assert len(errors) == 1 and "no shard at shard/shard.npz" in errors[0], proc.stderr
    assert str(tmp_path / "me-central-1") in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.e2e
def test_aggregator_without_deltas_gives_up_as_infrastructure(tmp_path: Path) -> None:
    """No worker ever delivers: after its wait limit the aggregator exits 4 (an
    infrastructure fault, not bad input), one line naming the round."""
    config = _config(tmp_path, "aggregator", "ap-southeast-1", wait_limit_s=1.0)
    proc = _role("burst.steps.regional_aggregator", config)
    assert proc.returncode == 4, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst regional aggregator:")]
    assert len(errors) == 1 and "no usable delta for round 0" in errors[0], proc.stderr
    assert "Traceback" not in proc.stderr
    # round 0 (the initial weights) was committed before it gave up: a restart resumes there
    assert (tmp_path / "exchange" / "global" / "manifests" / f"{0:012d}.weights.json").exists()


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
    assert report["failure"].startswith("preflight: region me-central-1 is not allowed")
    assert "XFER-MODEL-UPDATE" in (root / "refused" / "preflight.json").read_text()
    assert report["provisioned"] == [] and report["rounds_completed"] == 0
    # no stack: a region's workspace is <run>-<region> (burst-regional's stack id)
    assert not list(root.glob("refused-*/terraform/terraform.tfstate"))
    assert not [p for p in (root / "refused" / "stores").iterdir()]  # no store
    assert "Traceback" not in proc.stderr
