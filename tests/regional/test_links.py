"""The link emulator against the planner: one 3-region round through the wire form, the bytes
and seconds it records equal the planner's prediction (payload + the measured header)."""

from __future__ import annotations

import pytest
import torch

from burst.plan.crossregion import SEED_002_LINKS
from burst.regional.aggregate import aggregate_round, make_message
from burst.regional.compression import Codec
from burst.regional.estimates import delta_bytes, round_traffic
from burst.regional.links import LinkEmulator, star_links, transfer_seconds
from burst.regional.outer import NesterovOuterOptimizer

L = SEED_002_LINKS


class RecordingClock:
    """Stands in for time.sleep so the test never waits and never reads a wall clock."""

    def __init__(self) -> None:
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


def test_transfer_time_cost_and_log() -> None:
    clock = RecordingClock()
    em = LinkEmulator(star_links("eu-central-1", {"us-east-1": L["cross_continent"]}), clock, 0.5)
    rec = em.transfer("us-east-1", "eu-central-1", 360_000_000, "delta")
    assert rec.seconds == pytest.approx(0.36 / 0.18 + 0.102)
    assert rec.usd == pytest.approx(0.36 * 0.05)
    assert clock.slept == [pytest.approx(0.5 * rec.seconds)]
    local = em.transfer("us-east-1", "us-east-1", 10**9, "shard")
    assert local.seconds == 0.0 and not local.crosses
    assert em.bytes_crossing() == 360_000_000
    assert em.bytes_crossing("shard") == 0
    assert len(clock.slept) == 1  # nothing waits inside a region


def test_an_unknown_link_is_refused_not_assumed_free() -> None:
    em = LinkEmulator(star_links("eu", {"us": L["cross_continent"]}), RecordingClock())
    with pytest.raises(ValueError, match="no link known between us and ap"):
        em.transfer("us", "ap", 1, "delta")
    with pytest.raises(ValueError):
        transfer_seconds(1, L["same_az"].__class__(0.0, 1.0, 0.0))


def test_a_three_region_round_crosses_what_the_planner_predicts() -> None:
    agg = "eu-central-1"
    spans = {"eu-west-1": L["cross_region"], "us-east-1": L["cross_continent"]}
    em = LinkEmulator(star_links(agg, spans), RecordingClock())
    g = torch.Generator().manual_seed(21)
    global_params = {"emb": torch.randn(300, 64, generator=g), "out": torch.randn(64, generator=g)}
    msgs = []
    for i, region in enumerate([agg, *spans]):
        local = {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in global_params.items()}
        m = make_message(region, 0, 1000 + i, global_params, local, Codec())
        em.transfer(region, agg, len(m.payload), "delta")
        msgs.append(m)
    res = aggregate_round(global_params, msgs, 0, NesterovOuterOptimizer())
    for region in spans:
        em.transfer(agg, region, res.bytes_out, "update")

    payload = delta_bytes([v.numel() for v in global_params.values()])
    header = len(msgs[0].payload) - payload  # JSON header + length prefix, measured
    assert 0 < header < 500
    predicted = round_traffic(payload + header, res.bytes_out, list(spans.values()))
    assert em.bytes_crossing() == predicted.bytes_crossing
    assert em.egress_usd() == pytest.approx(predicted.egress_usd)
    ups = [r.seconds for r in em.records if r.kind == "delta" and r.crosses]
    downs = [r.seconds for r in em.records if r.kind == "update"]
    assert max(ups) == pytest.approx(predicted.upload_s)
    assert max(downs) == pytest.approx(predicted.download_s)
    # The aggregator's own worker never crosses a region.
    assert [r.crosses for r in em.records if r.src == agg and r.kind == "delta"] == [False]
