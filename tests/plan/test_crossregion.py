"""Seed 002's estimators and its four findings, with its link table."""

from __future__ import annotations

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.crossregion import (
    SEED_002_LINKS,
    Link,
    ModelProfile,
    communication_cost,
    compute_cost,
    dp_iteration_time,
    dp_pp_iteration_time,
    estimate_dp,
    estimate_dp_pp,
    estimate_pp,
    pp_1f1b_time,
    recommend_span,
)

L = SEED_002_LINKS
# A 1.5B-parameter model: fp16 gradients 3 GB, 5 MB of activations per micro-batch at a
# stage boundary, 0.3 s forward + 0.6 s backward per micro-batch on one GPU, 4 micro-batches.
PROFILE = ModelProfile(t_f=0.3, t_b=0.6, t_u=0.05, grad_gb=3.0, activation_gb=0.005, microbatches=4)
VM_PRICE = 4.0  # USD per GPU-hour (any positive price; the findings are ratios)


def test_link_table_is_the_catalogs() -> None:
    cat = load_catalog(use_env=False)
    for name, link in L.items():
        assert cat.link(name) == {
            "gb_per_s": link.gb_per_s,
            "latency_ms": link.latency_ms,
            "usd_per_gb": link.usd_per_gb,
        }


def test_formulas_by_hand() -> None:
    # T = (tf+tb)(ga-1) + max(tf+tb, 2(N-1)M/(N b)) + tu = 0.9*3 + max(0.9, 2*3*3/(4*1.5)) + 0.1
    assert dp_iteration_time(0.3, 0.6, 4, 4, 3.0, 1.5, 0.1) == pytest.approx(2.7 + 3.0 + 0.1)
    # compute-bound: the all-reduce hides behind the last micro-batch
    assert dp_iteration_time(0.3, 0.6, 1, 2, 0.1, 10.0, 0.0) == pytest.approx(0.9)
    # 1F1B: (m-1) * slowest + sum stages + sum transfers
    assert pp_1f1b_time([1.0, 2.0], [0.5], 3) == pytest.approx(2 * 2.0 + 3.0 + 0.5)
    # t_iter = t_pp + 2 (D-1) M / (D P b_min)
    assert dp_pp_iteration_time(1.0, 2, 4, 8.0, 0.5) == pytest.approx(1.0 + 2 * 1 * 8 / 4)
    assert compute_cost(3600, [(2, 10.0), (1, 5.0)]) == pytest.approx(25.0)
    assert communication_cost([(100, 0.02), (10, 0.05)]) == pytest.approx(2.5)


def test_finding_1_zones_of_one_region_cost_little_throughput() -> None:
    one_zone = estimate_dp(PROFILE, 16, L["same_az"], VM_PRICE)
    two_zones = estimate_dp(PROFILE, 16, L["cross_az"], VM_PRICE)
    assert two_zones.throughput / one_zone.throughput > 0.97
    # and it beats training on only the half that one zone can supply (lambda = 0.5)
    half = estimate_dp(PROFILE, 8, L["same_az"], VM_PRICE)
    assert 16 * two_zones.throughput > 8 * half.throughput


def test_finding_2_pipeline_parallelism_tolerates_crossing_regions() -> None:
    pp_local = estimate_pp(PROFILE, 4, [L["same_az"]] * 3, VM_PRICE)
    pp_regions = estimate_pp(PROFILE, 4, [L["same_az"], L["cross_region"], L["same_az"]], VM_PRICE)
    dp_local = estimate_dp(PROFILE, 4, L["same_az"], VM_PRICE)
    dp_regions = estimate_dp(PROFILE, 4, L["cross_region"], VM_PRICE)
    pp_loss = pp_regions.t_iter_s / pp_local.t_iter_s
    dp_loss = dp_regions.t_iter_s / dp_local.t_iter_s
    assert pp_loss < 1.15  # marginal
    assert pp_loss < dp_loss  # much more tolerant than data parallelism
    assert dp_loss > 1.5


def test_finding_3_data_parallelism_across_continents_loses_throughput_and_money() -> None:
    local = estimate_dp(PROFILE, 16, L["same_az"], VM_PRICE)
    continents = estimate_dp(PROFILE, 16, L["cross_continent"], VM_PRICE)
    half_local = estimate_dp(PROFILE, 8, L["same_az"], VM_PRICE)
    assert continents.throughput < 0.5 * local.throughput
    # samples per second: 16 GPUs across continents do less than the 8 of one zone alone
    assert 16 * continents.throughput < 8 * half_local.throughput
    # and each sample costs more (compute for longer plus $0.05/GB of all-reduce)
    per_sample = continents.total_usd / 16
    per_sample_local = half_local.total_usd / 8
    assert per_sample > 2 * per_sample_local
    assert continents.comm_usd > 0 == local.comm_usd


def test_finding_4_with_2d_parallelism_keep_data_parallel_traffic_in_one_region() -> None:
    # two regions with 4 GPUs each; 2 pipelines of 4 stages
    dp_cut = estimate_dp_pp(PROFILE, 2, 4, [L["same_az"]] * 3, L["cross_region"], VM_PRICE)
    pp_cut = estimate_dp_pp(
        PROFILE, 2, 4, [L["same_az"], L["cross_region"], L["same_az"]], L["same_az"], VM_PRICE
    )
    assert pp_cut.t_iter_s < dp_cut.t_iter_s
    assert pp_cut.total_usd < dp_cut.total_usd


def test_recommend_span_follows_the_findings() -> None:
    assert recommend_span(8, {"same_az": None}).span == "same_az"
    assert recommend_span(8, {"same_az": 8}).span == "same_az"
    assert recommend_span(16, {"same_az": 8, "cross_az": 16}).span == "cross_az"
    adv = recommend_span(32, {"same_az": 8, "cross_az": 16, "cross_region": 32})
    assert adv.span == "cross_region" and "pipeline" in adv.parallelism
    assert recommend_span(64, {"same_az": 8, "cross_az": 16, "cross_region": 32}).span == (
        "cross_continent"
    )


def test_bad_arguments_raise() -> None:
    with pytest.raises(ValueError):
        dp_iteration_time(0.1, 0.1, 0, 2, 1.0, 1.0, 0.0)
    with pytest.raises(ValueError):
        pp_1f1b_time([1.0, 1.0], [], 2)
    assert Link(1.0, 100.0, 0.0).latency_s == pytest.approx(0.1)
