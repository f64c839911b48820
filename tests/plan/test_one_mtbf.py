"""One name, one quantity (issue 25 bug 4): the job's MTBF and the Young/Daly interval are
computed once (``burst.plan.reliability``) and mean the same in the plan, the trainer and
``burst simulate``. Each test here failed before the fix."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from burst.documents import PlanDocument, ProvisionDocument
from burst.plan.catalog import load_catalog
from burst.plan.goodput import SimParams, young_daly_report
from burst.plan.interval import young_daly
from burst.plan.placement import PlanOptions, plan
from burst.train.schedule import resolve_mtbf

from .conftest import make_spec


def _spot_catalog(tmp_path: Path) -> Path:
    user = tmp_path / "spot.yaml"
    user.write_text(
        "offers:\n  - provider: aws\n    region: ap-southeast-3\n    gpu_type: h100\n"
        "    spot_usd_per_hour: {value: 30.0, source: 'test quote', date: 2026-11}\n"
    )
    return user


def _floor_spec(**extra: object):  # type: ignore[no-untyped-def]
    return make_spec(
        **{
            "training.step_seconds": 3600.0,
            "training.steps": 40,
            "budget.max_hours": 100,
            "budget.max_usd": 50000,
            "training.checkpoint.interval_steps": "auto",
            "model.parameters": 7e9,
            "compute.gpu_count": 32,
            "compute.regions": ["ap-southeast-3"],
            **extra,
        }
    )


def test_trainer_and_planner_agree_on_the_mtbf_of_a_floor_candidate(tmp_path: Path) -> None:
    """spot_with_floor: only the spot nodes are pre-empted. The planner divides the node MTBF
    by the preemptible nodes; the trainer, given the same candidate, must too."""
    cat = load_catalog([_spot_catalog(tmp_path)], use_env=False)
    spec = _floor_spec(**{"compute.mtbf_hours": 2.0})
    doc = plan(spec, cat, opts=PlanOptions(replicas=4, floor_nodes=1))
    floor = next(c for c in doc["candidates"] if c["capacity"] == "spot_with_floor")
    # the spec's job MTBF is for all 4 nodes pre-emptible; 3 of them are: 2 h x 4 / 3
    assert floor["mtbf_hours"] == pytest.approx(2.0 * 4 / 3)
    infra = ProvisionDocument.model_validate({"candidate": floor})  # provision got the floor
    mtbf_s, _ = resolve_mtbf(spec, PlanDocument.model_validate(doc), infra)
    assert mtbf_s == pytest.approx(floor["mtbf_hours"] * 3600)


def test_trainer_divides_the_catalog_mtbf_by_the_preemptible_nodes() -> None:
    """A hand-written plan (no mtbf_hours) with a floor: catalog node MTBF / spot nodes."""
    spec = _floor_spec()
    cand = {
        "provider": "aws",
        "region": "ap-southeast-3",
        "capacity": "spot_with_floor",
        "nodes": 4,
        "floor_nodes": 1,
    }
    mtbf_s, source = resolve_mtbf(spec, PlanDocument.model_validate({"candidates": [cand]}))
    assert mtbf_s == pytest.approx(8 * 3600 / 3)  # aws spot_node_mtbf_hours 8, 3 spot nodes
    assert "3" in source


def test_plan_young_daly_is_the_raw_interval_as_in_the_train_document(tmp_path: Path) -> None:
    """``young_daly_interval_s`` is sqrt(2 C M) everywhere; the interval used (clamped to the
    upload time) is ``checkpoint_interval_s``."""
    cat = load_catalog([_spot_catalog(tmp_path)], use_env=False)
    # a big model: the upload (224 s) is longer than Young/Daly from its small blocking cost
    spec = make_spec(
        **{
            "training.step_seconds": 1.0,
            "training.steps": 4000,
            "budget.max_usd": 50000,
            "training.checkpoint.interval_steps": "auto",
            "model.parameters": 7e9,
            "compute.mtbf_hours": 1.0,
            "compute.capacity": "spot",
            "compute.regions": ["ap-southeast-3"],
        }
    )
    doc = plan(spec, cat, opts=PlanOptions(replicas=4))
    first = doc["candidates"][0]
    assert first["capacity"] == "spot"
    work = doc["workload"]
    raw = young_daly(work["checkpoint_cost_s"], first["mtbf_hours"] * 3600)
    assert raw < work["upload_s"]  # the case where the two used to differ
    assert first["young_daly_interval_s"] == pytest.approx(raw)
    assert first["checkpoint_interval_s"] == pytest.approx(work["upload_s"])


def test_simulate_young_daly_is_the_raw_interval() -> None:
    p = SimParams(mtbf_s=3600, notice_s=0, checkpoint_cost_s=5, upload_s=200, restart_s=60)
    doc = young_daly_report(p, seed=0, replicas=2)
    assert doc["young_daly_interval_s"] == pytest.approx(math.sqrt(2 * 5 * 3600))
    assert doc["default_interval_s"] == pytest.approx(200)
