"""Issue 21, planner: a regional-sync spec's plan document carries the rounds' bytes, egress and
sync time, the chosen H and the comparison with synchronous DP (burst.plan.regional), and
`burst plan` prints them. The figures are recomputed here from the formulas and the catalog
(docs/regional.md "Planning"), not copied from the code's output."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from burst.documents import parse_document
from burst.documents.plan import PlanDocument
from burst.plan.catalog import Catalog, load_catalog
from burst.plan.datastrategy import inter_region_price
from burst.plan.placement import plan
from burst.spec import BurstJob, parse_spec

REPO = Path(__file__).resolve().parents[2]
SG, AE = "ap-southeast-1", "me-central-1"
PARAMS = 1.5e9  # the worked example's model: bf16 gradients of 3 GB
STEP_S = 3.65
STEPS = 470


@pytest.fixture(scope="module")
def cat() -> Catalog:
    return load_catalog(use_env=False)


def spec_doc(**regional: Any) -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["data"].update(region=None, shards={SG: 0.005, AE: 0.005})
    doc["model"]["parameters"] = PARAMS
    doc["training"].update(
        steps=STEPS,
        step_seconds=STEP_S,
        strategy="regional-sync",
        regional_sync={"aggregation_region": SG, **regional},
    )
    doc["training"]["checkpoint"]["interval_steps"] = 50
    return doc


def job(doc: dict[str, Any]) -> BurstJob:
    return parse_spec(yaml.safe_dump(doc), "test spec")


def test_plan_of_a_regional_sync_spec_picks_h_and_compares_with_dp(cat: Catalog) -> None:
    doc = plan(job(spec_doc()), cat)
    parse_document(PlanDocument, doc, "plan")  # the document model accepts it
    r = doc["regional"]
    price = inter_region_price(cat, doc["candidates"][0]["provider"])[0]
    link = cat.link("cross_continent")  # Singapore to the UAE: two areas
    assert r["links"] == {AE: "cross_continent"}
    assert r["regions"] == [SG, AE] and r["aggregation_region"] == SG
    # int8: one byte a value plus a float32 scale per block of 256
    delta = int(PARAMS) + 4 * math.ceil(PARAMS / 256)
    assert r["delta_bytes"] == delta == 1_523_437_500
    one_way = delta / 1e9 / link["gb_per_s"] + link["latency_ms"] / 1000
    assert r["sync_s_per_round"] == pytest.approx(2 * one_way)  # 17.13 s
    assert r["bytes_per_round"] == 2 * delta
    assert r["egress_usd_per_round"] == pytest.approx(2 * delta / 1e9 * price)
    # H: the smallest with sync <= 10 % of H x 3.65 s
    h = r["local_steps"]
    assert r["sync_s_per_round"] <= 0.1 * h * STEP_S < r["sync_s_per_round"] + 0.1 * STEP_S
    assert h == 47 and r["rounds"] == 10
    assert "planner" in r["local_steps_basis"]
    # synchronous DP over 2 regions: 2 (N - 1) M = 6 GB cross a step; the all-reduce
    # 2 (1) 3 / (2 x 0.18) s plus two latencies, longer than the step's compute
    assert r["sync_dp_bytes"] == pytest.approx(STEPS * 6e9)
    t_dp = max(STEP_S, 3.0 / link["gb_per_s"] + 2 * link["latency_ms"] / 1000)
    assert r["sync_dp_wall_s"] == pytest.approx(STEPS * t_dp)
    assert r["wall_s"] == pytest.approx(STEPS * STEP_S + 10 * r["sync_s_per_round"])
    assert r["bytes_ratio"] == pytest.approx(10 * 2 * delta / (STEPS * 6e9))
    assert r["bytes_ratio"] < 0.011 and r["wall_ratio"] < 0.5


def test_local_steps_and_codec_from_the_spec(cat: Catalog) -> None:
    spec = spec_doc(local_steps=100, first_local_steps=100, compression={"codec": "topk"})
    r = plan(job(spec), cat)["regional"]
    assert r["local_steps"] == 100 and r["rounds"] == 5  # first_local_steps = H: constant
    assert r["schedule"] == "100 x 4, 70"
    assert r["rounds_basis"] == "training.regional_sync.first_local_steps"
    assert r["local_steps_basis"] == "training.regional_sync.local_steps"
    assert r["codec"] == "topk"
    k = math.ceil(PARAMS * 0.01)
    assert r["delta_bytes"] == 8 * k  # int32 index + float32 value per kept value


def test_the_planner_chooses_the_round_schedule(cat: Catalog) -> None:
    """Issue 31: with first_local_steps null the planner picks the schedule: the first round
    the shortest whose sync stays under sync_fraction of its compute (the planner's own H, 47
    here), doubling up to the spec's H; constant when H is the planner's own; the spec's value
    wins; the plan counts every round's bytes."""
    default = plan(job(spec_doc()), cat)["regional"]
    assert default["first_local_steps"] is None and default["schedule"] == "47 x 10"
    assert default["rounds_basis"].startswith("planner: constant")
    r = plan(job(spec_doc(local_steps=200)), cat)["regional"]
    assert r["first_local_steps"] == 47 and r["schedule"] == "47, 94, 188, 141"
    assert r["rounds"] == 4 and r["rounds_basis"].startswith("planner: from the shortest round")
    assert r["bytes_over_run"] == 4 * r["bytes_per_round"]
    for n in (47, 94, 188):  # every full round keeps the sync fraction
        assert r["sync_s_per_round"] <= 0.1 * n * STEP_S
    assert r["sync_s_per_round"] > 0.1 * 46 * STEP_S  # and the first is the shortest that does
    flat = plan(job(spec_doc(local_steps=200, first_local_steps=200)), cat)["regional"]
    assert flat["first_local_steps"] == 200 and flat["schedule"] == "200 x 2, 70"
    assert flat["rounds"] == 3 and flat["bytes_over_run"] == 3 * r["bytes_per_round"]
    given = plan(job(spec_doc(local_steps=200, first_local_steps=20)), cat)["regional"]
    assert given["schedule"] == "20, 40, 80, 160, 170" and given["first_local_steps"] == 20


def test_single_region_plan_has_no_regional_section(cat: Catalog) -> None:
    doc = spec_doc()
    del doc["training"]["strategy"], doc["training"]["regional_sync"]
    assert "regional" not in plan(job(doc), cat)


def test_burst_plan_prints_the_regional_section(tmp_path: Path) -> None:
    from burst.cli.main import cli

    spec = tmp_path / "regional.yaml"
    spec.write_text(yaml.safe_dump(spec_doc()))
    out = CliRunner().invoke(cli, ["plan", str(spec)], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    assert "regional sync: 2 regions, aggregator ap-southeast-1; H 47" in out.output
    assert "synchronous DP: 2,820 GB" in out.output
    assert "  rounds: 47 x 10 inner steps (planner: constant" in out.output
    # the outer optimizer and the loss ratio the measured table expects for it (issue 31)
    from burst.regional.defaults import resolve_outer

    shipped = resolve_outer("nesterov", None, None, 2, 47)
    assert f"outer nesterov lr {shipped.lr:g} momentum {shipped.momentum:g}" in out.output
    assert shipped.expected_loss_ratio is not None
    assert f"expected held-out loss: {shipped.expected_loss_ratio:.3f} x" in out.output
    # next to the bytes the schedule costs
    assert "at equal tokens (measured" in out.output and "(bytes ratio 0.0108)" in out.output
