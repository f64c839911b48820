"""Issue 6: "train on regional shards" is a strategy the plan chooses (placement calls
datastrategy.choose for every candidate), from shard sizes, egress price, link bandwidth and
the preflight verdicts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.plan.catalog import load_catalog
from burst.plan.datastrategy import COMPUTE_TO_DATA, DATA_TO_COMPUTE, REGIONAL_SHARDS, choose
from burst.plan.placement import PlanOptions, plan

from .conftest import QUICKSTART, make_spec

TWO = ["ap-southeast-1", "ap-southeast-3"]
BIG = {"ap-southeast-1": 60_000.0, "ap-southeast-3": 40_000.0}  # 100 TB split over two regions


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalog(use_env=False)


def _decide(verdicts: dict[str, str], may_move: dict[str, bool] | None = None) -> dict:  # type: ignore[type-arg]
    return {
        "spec_sha256": make_spec(**{"compute.regions": TWO}).sha256(),
        "policy_sha256": "0" * 64,  # built by hand: policies not checked here
        "decisions": [
            {
                "region": r,
                "provider": "aws",
                "verdict": v,
                "reasons": [],
                "data_may_move": (may_move or {}).get(r, True),
            }
            for r, v in verdicts.items()
        ],
    }


def test_big_sharded_data_trains_on_regional_shards(cat) -> None:  # type: ignore[no-untyped-def]
    job = make_spec(**{"compute.regions": TWO})
    doc = plan(job, cat, None, PlanOptions(shards=BIG, replicas=4))
    assert doc["data"]["strategy"] == REGIONAL_SHARDS
    assert {c["data_strategy"] for c in doc["candidates"]} == {REGIONAL_SHARDS}
    alts = {a["strategy"]: a for a in doc["data"]["alternatives"]}
    assert set(alts) == {COMPUTE_TO_DATA, DATA_TO_COMPUTE, REGIONAL_SHARDS}
    # the rejected alternative gathers the shards the first candidate does not hold, at $0.09/GB
    first_region = doc["candidates"][0]["region"]
    elsewhere = sum(gb for r, gb in BIG.items() if r != first_region)
    moved = [a for a in alts.values() if a["feasible"] and a["strategy"] != REGIONAL_SHARDS]
    assert [a["egress_usd"] for a in moved] == [pytest.approx(elsewhere * 0.09)]
    # the sync of a 1e5-parameter model is tiny: 6 rounds (30 steps / 5) of 2e-4 GB each way
    assert doc["data"]["sync_rounds"] == 6
    assert doc["data"]["sync_gb"] == pytest.approx(1e5 * 2 / 1e9)
    sync_usd = 6 * 2 * 2e-4 * 0.09
    assert alts[REGIONAL_SHARDS]["egress_usd"] == pytest.approx(sync_usd)
    assert doc["candidates"][0]["egress_usd"] == round(sync_usd, 4)  # the plan rounds to 1e-4


def test_small_shards_and_a_big_model_move_the_data_instead(cat) -> None:  # type: ignore[no-untyped-def]
    """The same two regions, 15 GB of data and a 7e9-parameter model: syncing 14 GB of
    weights each way six times costs more than moving 5 GB once."""
    job = make_spec(**{"compute.regions": TWO, "model.parameters": 7e9, "budget.max_usd": 1e9})
    shards = {"ap-southeast-1": 10.0, "ap-southeast-3": 5.0}
    data, options = choose(
        cat,
        shards,
        ("aws", "ap-southeast-1"),
        True,
        sync_gb=7e9 * 2 / 1e9,
        sync_rounds=6,
        runnable=set(TWO),
    )
    by = {o.strategy: o for o in options}
    assert data.strategy == COMPUTE_TO_DATA and data.egress_usd == pytest.approx(5 * 0.09)
    assert by[REGIONAL_SHARDS].feasible
    assert by[REGIONAL_SHARDS].egress_usd == pytest.approx(6 * 2 * 14 * 0.09)
    # and through placement
    doc = plan(job, cat, None, PlanOptions(shards=shards, replicas=4))
    assert doc["data"]["strategy"] in (COMPUTE_TO_DATA, DATA_TO_COMPUTE)
    assert REGIONAL_SHARDS not in {c["data_strategy"] for c in doc["candidates"]}


def test_a_denied_shard_region_rules_out_regional_shards(cat) -> None:  # type: ignore[no-untyped-def]
    job = make_spec(**{"compute.regions": TWO})
    record = _decide({"ap-southeast-1": "allow", "ap-southeast-3": "deny"})
    doc = plan(job, cat, record, PlanOptions(shards=BIG, replicas=4))
    assert {c["region"] for c in doc["candidates"]} == {"ap-southeast-1"}
    assert doc["data"]["strategy"] == COMPUTE_TO_DATA  # the 40 TB shard comes to Singapore
    alts = {a["strategy"]: a for a in doc["data"]["alternatives"]}
    assert not alts[REGIONAL_SHARDS]["feasible"]
    assert "ap-southeast-3" in alts[REGIONAL_SHARDS]["reason"]


def test_data_that_may_not_move_still_trains_where_it_is(cat) -> None:  # type: ignore[no-untyped-def]
    """No shard may move (preflight data_may_move false everywhere): gathering the data is
    infeasible, regional shards (only the model syncs) remain."""
    job = make_spec(**{"compute.regions": TWO})
    record = _decide(
        {"ap-southeast-1": "allow", "ap-southeast-3": "allow"},
        {"ap-southeast-1": False, "ap-southeast-3": False},
    )
    doc = plan(
        job, cat, record, PlanOptions(shards={"ap-southeast-1": 10.0, "ap-southeast-3": 5.0})
    )
    assert {c["data_strategy"] for c in doc["candidates"]} == {REGIONAL_SHARDS}
    alts = {a["strategy"]: a for a in doc["data"]["alternatives"]}
    moving = [a for a in alts.values() if a["strategy"] != REGIONAL_SHARDS and a["egress_gb"] > 0]
    assert moving and all(not a["feasible"] and "may not leave" in a["reason"] for a in moving)


def test_one_data_region_keeps_the_single_region_strategies(cat) -> None:  # type: ignore[no-untyped-def]
    doc = plan(make_spec(), cat, None, PlanOptions(replicas=4))
    assert doc["data"]["shards"] == {"ap-southeast-1": 0.01}
    strategies = {c["region"]: c["data_strategy"] for c in doc["candidates"]}
    assert strategies["ap-southeast-1"] == COMPUTE_TO_DATA
    assert strategies["ap-southeast-3"] == DATA_TO_COMPUTE
    alts = {a["strategy"]: a for a in doc["data"]["alternatives"]}
    assert alts[REGIONAL_SHARDS]["reason"] == "one shard: nothing to shard"


def test_bad_shards_are_bad_input(cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInputError, match="shards: ap-southeast-1: size"):
        plan(make_spec(), cat, None, PlanOptions(shards={"ap-southeast-1": -1.0}))
    with pytest.raises(BadInputError, match="sync_rounds"):
        plan(make_spec(), cat, None, PlanOptions(sync_rounds=0))


@pytest.mark.e2e
def test_cli_shard_option(burst_cmd: list[str], tmp_path: Path) -> None:
    args = [*burst_cmd, "plan", str(QUICKSTART), "--replicas", "4", "--json"]
    shards = ["--shard", "ap-southeast-1=60000", "--shard", "ap-southeast-3=40000"]
    proc = subprocess.run([*args, *shards], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["data"]["strategy"] == REGIONAL_SHARDS
    bad = subprocess.run(
        [*args, "--shard", "ap-southeast-1"], capture_output=True, text=True, timeout=120
    )
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0 and "REGION=GB" in bad.stderr
