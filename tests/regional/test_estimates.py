"""The planner's numbers for hybrid regional training against a worked example on seed 002's
figures (link table and DP formula), computed here by hand."""

from __future__ import annotations

import math

import pytest
import torch

from burst.plan.crossregion import SEED_002_LINKS, Link, ModelProfile
from burst.regional.compression import Codec
from burst.regional.estimates import (
    choose_local_steps,
    compare_with_sync_dp,
    delta_bytes,
    local_step_time,
    plan_regional,
    round_traffic,
)

L = SEED_002_LINKS
# The same 1.5B-parameter model as tests/plan/test_crossregion.py: fp16 gradients of 3 GB,
# 0.3 s forward + 0.6 s backward per micro-batch, 4 micro-batches, 0.05 s update.
PROFILE = ModelProfile(t_f=0.3, t_b=0.6, t_u=0.05, grad_gb=3.0, activation_gb=0.005, microbatches=4)
PARAMS = 1_500_000_000


def test_delta_bytes_of_the_worked_example() -> None:
    # int8, blocks of 256: one byte a value + a float32 scale for each of 5,859,375 blocks.
    assert delta_bytes([PARAMS]) == 1_500_000_000 + 4 * 5_859_375 == 1_523_437_500
    assert delta_bytes([PARAMS], "none") == 6_000_000_000
    assert delta_bytes([PARAMS], "topk", topk_fraction=0.01) == 8 * 15_000_000


def test_delta_bytes_equal_what_the_codec_produces_for_a_real_model() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(97, 24), torch.nn.Linear(24, 97))
    sizes = [p.numel() for p in model.parameters()]
    delta = {n: p.detach() for n, p in model.named_parameters()}
    for name in ("int8", "topk", "none"):
        enc = Codec(name).encode(delta)
        assert enc.payload_bytes == delta_bytes(sizes, name)


def test_round_traffic_across_continents_two_regions() -> None:
    up = down = 1_523_437_500
    t = round_traffic(up, down, [L["cross_continent"]])
    # 1.5234375 GB at 0.18 GB/s + 102 ms each way.
    one_way = 1.5234375 / 0.18 + 0.102
    assert t.upload_s == pytest.approx(one_way)
    assert t.sync_s == pytest.approx(2 * one_way)  # 17.131 s
    assert t.bytes_crossing == 3_046_875_000
    assert t.egress_usd == pytest.approx(2 * 1.5234375 * 0.05)  # $0.152 a round


def test_round_traffic_takes_the_slowest_link_and_prices_each() -> None:
    gb = 1_000_000_000
    t = round_traffic(gb, gb, [L["cross_region"], L["cross_continent"]])
    assert t.upload_s == pytest.approx(max(1 / 0.63 + 0.031, 1 / 0.18 + 0.102))
    assert t.egress_usd == pytest.approx(2 * 0.02 + 2 * 0.05)
    assert t.bytes_crossing == 4 * gb
    assert round_traffic(gb, gb, []).sync_s == 0.0
    with pytest.raises(ValueError):
        round_traffic(gb, gb, [Link(0.0, 1.0, 0.0)])


def test_choose_h_keeps_sync_under_the_stated_fraction() -> None:
    step = local_step_time(PROFILE)
    assert step == pytest.approx(0.9 * 4 + 0.05)  # 3.65 s
    sync = 2 * (1.5234375 / 0.18 + 0.102)
    h = choose_local_steps(sync, step, 0.1)
    # 17.131 / (0.1 x 3.65) = 46.93 -> 47 local steps.
    assert h == 47
    assert sync <= 0.1 * h * step
    assert sync > 0.1 * (h - 1) * step
    assert choose_local_steps(0.0, step) == 1
    with pytest.raises(ValueError):
        choose_local_steps(sync, step, 0.0)


def test_comparison_with_synchronous_dp_across_continents() -> None:
    up = delta_bytes([PARAMS])
    t = round_traffic(up, up, [L["cross_continent"]])
    c = compare_with_sync_dp(PROFILE, [L["cross_continent"]], t, local_steps=47, steps=470)
    assert c.rounds == 10
    # Seed 002, DP over N=2, plus the ring's 2 (N - 1) latencies:
    # (0.9)(4-1) + max(0.9, 2 (1) 3 / (2 x 0.18) + 2 x 0.102) + 0.05 = 19.6207 s.
    t_dp = 0.9 * 3 + 2 * 1 * 3.0 / (2 * 0.18) + 2 * 0.102 + 0.05
    assert c.dp_wall_s == pytest.approx(470 * t_dp)
    # A ring over 2 regions crosses 2 (N - 1) M = 6 GB a step, $0.05/GB.
    assert c.dp_bytes == pytest.approx(470 * 6e9)
    assert c.dp_egress_usd == pytest.approx(470 * 6 * 0.05)  # $141
    assert c.regional_bytes == pytest.approx(10 * 3_046_875_000)
    assert c.regional_egress_usd == pytest.approx(10 * 2 * 1.5234375 * 0.05)  # $1.52
    regional_wall = 470 * 3.65 + 10 * 2 * (1.5234375 / 0.18 + 0.102)
    assert c.regional_wall_s == pytest.approx(regional_wall)
    assert c.bytes_ratio == pytest.approx(30.46875 / 2820)  # 0.0108
    assert c.wall_ratio == pytest.approx(regional_wall / (470 * t_dp))  # 0.205
    assert c.wall_ratio < 0.5


def test_comparison_three_regions_in_one_continent() -> None:
    links = [L["cross_region"], L["cross_region"]]
    up = delta_bytes([PARAMS])
    t = round_traffic(up, up, links)
    c = compare_with_sync_dp(PROFILE, links, t, local_steps=100, steps=250)
    assert c.rounds == 3  # the last, partial round still syncs
    # DP over N=3 at 0.63 GB/s: all-reduce 2 (2) 3 / (3 x 0.63) + 4 x 0.031 = 6.473 s.
    t_dp = 0.9 * 3 + max(0.9, 4 * 3.0 / (3 * 0.63) + 4 * 0.031) + 0.05
    assert c.dp_wall_s == pytest.approx(250 * t_dp)
    assert c.dp_bytes == pytest.approx(250 * 3 * (2 * 2 * 3.0 / 3) * 1e9)
    assert c.regional_bytes == pytest.approx(3 * 2 * 2 * up)
    assert math.isclose(c.egress_ratio, c.regional_egress_usd / c.dp_egress_usd)


def test_plan_regional_picks_h_and_reports_the_worked_example() -> None:
    plan = plan_regional(PROFILE, [PARAMS], [L["cross_continent"]], steps=470)
    doc = plan.to_dict()
    assert doc["local_steps"] == 47 and doc["rounds"] == 10
    assert doc["delta_bytes"] == 1_523_437_500
    assert doc["bytes_per_round"] == 3_046_875_000
    assert doc["egress_usd_per_round"] == pytest.approx(0.15234375)
    assert doc["bytes_ratio"] == pytest.approx(30.46875 / 2820)
    assert plan.traffic.sync_s <= 0.1 * 47 * 3.65
    fixed = plan_regional(PROFILE, [PARAMS], [L["cross_continent"]], steps=470, local_steps=500)
    assert fixed.comparison.rounds == 1  # 470 steps fit in one round of 500
    # With topk 1 %, a delta is 8 x 15M = 120 MB: H needed for 10 % drops accordingly.
    sparse = plan_regional(PROFILE, [PARAMS], [L["cross_continent"]], steps=470, codec="topk")
    sync = 2 * (0.12 / 0.18 + 0.102)
    assert sparse.comparison.local_steps == math.ceil(sync / (0.1 * 3.65))
