"""``burst plan --explain`` names every term of the cost, and the terms add up to the total
shown (issue 46). Every candidate's ``cost_terms`` sum to its ``expected_cost_usd``: for every
GPU type of the default catalog on every provider and region it knows, at GPU counts that fill
a node, leave part of one idle or span several, on every capacity (a floor included); and for
the seeds' worked examples. The text's cents add up to the total it prints."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.placement import PlanOptions, plan

from .conftest import make_spec, write_spec
from .test_explain import ONE_RUBIN

Cli = Callable[..., subprocess.CompletedProcess[str]]
CAT = load_catalog(use_env=False)
GPU_TERMS = ("training", "start-up", "pre-emptions and checkpoints")
ALWAYS = (*GPU_TERMS, "egress", "storage", "orchestration", "labour")


def _check(cand: dict[str, Any]) -> None:
    names = [t["term"] for t in cand["cost_terms"]]
    assert set(ALWAYS) <= set(names), names
    assert ("node rounding" in names) == (cand["gpus"] > cand["gpus_used"])
    spot = cand["capacity"] != "on_demand"
    assert ("spot discount" in names) == spot, names  # every price here has an on-demand one
    total = sum(t["usd"] for t in cand["cost_terms"])
    assert total == pytest.approx(cand["expected_cost_usd"], abs=1e-4), cand["cost_terms"]
    gpu = sum(t["usd"] for t in cand["cost_terms"] if t["term"] not in ALWAYS[3:])
    assert gpu == pytest.approx(cand["compute_usd"], abs=1e-4)


@pytest.mark.parametrize("gpus", [1, 3, 8, 12])
@pytest.mark.parametrize("gpu_type", sorted(CAT.gpus))
def test_terms_sum_to_the_total_for_every_catalog_entry(gpu_type: str, gpus: int) -> None:
    spec = make_spec(
        **{
            "compute.gpu_type": gpu_type,
            "compute.gpu_count": gpus,
            "compute.providers": sorted({p for p, _ in CAT.regions}),
            "compute.regions": sorted({r for _, r in CAT.regions}),
            "budget.max_usd": 1e9,
            "budget.max_hours": 8000,
        }
    )
    doc = plan(spec, CAT, opts=PlanOptions(replicas=2, floor_nodes=1))
    sites = {(c["provider"], c["region"]) for c in doc["candidates"]}
    offers = {(o.provider, o.region) for o in CAT.offers.values() if o.gpu_type == gpu_type}
    runnable = {p for p, _ in sites}
    assert {s for s in offers if s[0] in runnable} <= sites  # every offer of it was priced
    assert {c["capacity"] for c in doc["candidates"]} >= {"spot", "on_demand"}
    for cand in doc["candidates"]:
        _check(cand)


SEEDS = {
    "001": {
        **ONE_RUBIN,
        "training.steps": 24,
        "training.step_seconds": 3600.0,
        "compute.regions": ["ap-southeast-3"],
        "data.region": "ap-southeast-3",
        "budget.max_hours": 100,
    },
    "003": {
        **ONE_RUBIN,
        "compute.capacity": "spot",
        "training.steps": 200,
        "training.step_seconds": 3600.0,
        "compute.regions": ["ap-southeast-3"],
        "data.region": "ap-southeast-1",
        "data.size_gb": 500,
        "model.parameters": 1.5625e10,
        "training.checkpoint.keep_full": 1,
        "training.checkpoint.keep_weights": 1,
        "budget.max_usd": 50000,
        "budget.max_hours": 1000,
    },
    "000": {
        "compute.regions": ["ap-southeast-3"],
        "data.region": "ap-southeast-1",
        "data.size_gb": 100000,
        "budget.max_usd": 1e6,
        "budget.max_hours": 8000,
    },
}


@pytest.mark.parametrize("seed", sorted(SEEDS))
def test_explain_names_every_term_and_they_add_up(
    burst_cli: Cli, tmp_path: Path, seed: str
) -> None:
    spec = write_spec(tmp_path / f"s{seed}.yaml", **SEEDS[seed])
    proc = burst_cli(["plan", str(spec), "--explain", "--json", "--replicas", "2"])
    assert proc.returncode == 0, proc.stderr
    for cand in json.loads(proc.stdout)["plan"]["candidates"]:
        _check(cand)
    text = burst_cli(["plan", str(spec), "--explain", "--replicas", "2"])
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    head = next(i for i, x in enumerate(lines) if ", term by term (" in x)
    end = next(i for i in range(head, len(lines)) if lines[i].startswith("  = total $"))
    shown = [re.match(r"  ([a-z -]+): (-?)\$([\d,]+\.\d\d) \(", x) for x in lines[head + 1 : end]]
    assert all(shown), lines[head + 1 : end]
    cents = sum((-1 if m[2] else 1) * round(float(m[3].replace(",", "")) * 100) for m in shown if m)
    total = re.match(r"  = total \$([\d,]+\.\d\d) ", lines[end])
    assert total and cents == round(float(total[1].replace(",", "")) * 100)
    assert {m[1] for m in shown if m} >= set(ALWAYS)
