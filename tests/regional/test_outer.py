"""The outer step (Nesterov, DiLoCo defaults), token-weighted averaging and staleness."""

from __future__ import annotations

import logging

import pytest
import torch

from burst.regional.compression import Codec
from burst.regional.outer import (
    DILOCO_DEFAULTS,
    NesterovOuterOptimizer,
    OuterSettings,
    StalenessRule,
    WorkerDelta,
    average_deltas,
    pseudo_gradient,
)


def test_defaults_are_dilocos_published_settings() -> None:
    assert (DILOCO_DEFAULTS.lr, DILOCO_DEFAULTS.momentum, DILOCO_DEFAULTS.nesterov) == (
        0.7,
        0.9,
        True,
    )
    assert DILOCO_DEFAULTS.inner_optimizer == "adamw"
    assert DILOCO_DEFAULTS.local_steps == 500


def test_outer_step_matches_a_hand_computed_nesterov_update() -> None:
    opt = NesterovOuterOptimizer()
    p = {"w": torch.tensor([1.0, -2.0], dtype=torch.float64)}
    # Step 1: b = g = [0.5, 1.0]; update = g + 0.9 b = [0.95, 1.9]; p -= 0.7 update.
    p = opt.step(p, {"w": torch.tensor([0.5, 1.0], dtype=torch.float64)})
    assert torch.allclose(p["w"], torch.tensor([0.335, -3.33], dtype=torch.float64))
    # Step 2: b = 0.9 [0.5, 1.0] + [0.1, -0.2] = [0.55, 0.7];
    # update = [0.1 + 0.495, -0.2 + 0.63] = [0.595, 0.43]; p -= 0.7 update.
    p = opt.step(p, {"w": torch.tensor([0.1, -0.2], dtype=torch.float64)})
    assert torch.allclose(p["w"], torch.tensor([-0.0815, -3.631], dtype=torch.float64))


@pytest.mark.parametrize("seed", [0, 1])
def test_outer_step_agrees_with_torch_sgd_nesterov(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    start = torch.randn(4, 3, generator=g)
    grads = [torch.randn(4, 3, generator=g) for _ in range(4)]
    ref = torch.nn.Parameter(start.clone())
    sgd = torch.optim.SGD([ref], lr=0.7, momentum=0.9, nesterov=True)
    opt = NesterovOuterOptimizer()
    p = {"w": start.clone()}
    for gr in grads:
        ref.grad = gr.clone()
        sgd.step()
        p = opt.step(p, {"w": gr})
    assert torch.allclose(p["w"], ref.detach(), atol=1e-6)


def test_momentum_state_survives_a_restart_of_the_aggregator() -> None:
    grads = [{"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([-0.5, 0.25])}]
    a = NesterovOuterOptimizer()
    p = a.step({"w": torch.zeros(2)}, grads[0])
    saved_p, saved_state = {k: v.clone() for k, v in p.items()}, a.state_dict()
    expected = a.step(p, grads[1])
    b = NesterovOuterOptimizer()
    b.load_state_dict(saved_state)
    assert torch.equal(b.step(saved_p, grads[1])["w"], expected["w"])
    fresh = NesterovOuterOptimizer().step(saved_p, grads[1])
    assert not torch.equal(fresh["w"], expected["w"])  # momentum matters


def test_plain_momentum_without_nesterov() -> None:
    opt = NesterovOuterOptimizer(OuterSettings(lr=0.5, momentum=0.5, nesterov=False))
    p = opt.step({"w": torch.tensor([0.0])}, {"w": torch.tensor([1.0])})
    p = opt.step(p, {"w": torch.tensor([1.0])})
    # b1 = 1, p = -0.5; b2 = 1.5, p = -0.5 - 0.75.
    assert p["w"].item() == pytest.approx(-1.25)


def test_pseudo_gradient_is_global_minus_local() -> None:
    d = pseudo_gradient({"w": torch.tensor([1.0, 2.0])}, {"w": torch.tensor([0.5, 3.0])})
    assert torch.equal(d["w"], torch.tensor([0.5, -1.0]))
    with pytest.raises(ValueError):
        pseudo_gradient({"w": torch.zeros(1)}, {"v": torch.zeros(1)})


def test_average_is_weighted_by_tokens() -> None:
    a = WorkerDelta("eu", 3, 100, {"w": torch.tensor([1.0, 0.0])})
    b = WorkerDelta("us", 3, 300, {"w": torch.tensor([0.0, 4.0])})
    idle = WorkerDelta("ap", 3, 0, {"w": torch.tensor([9.0, 9.0])})
    avg = average_deltas([a, b, idle], current_round=3)
    # (100 [1, 0] + 300 [0, 4]) / 400 = [0.25, 3.0]; a worker with no tokens adds nothing.
    assert torch.allclose(avg.mean["w"], torch.tensor([0.25, 3.0]))
    assert avg.tokens == 400
    assert avg.accepted == ("eu", "us", "ap") and avg.dropped == ()


def test_stale_deltas_are_dropped_by_default_and_logged(caplog: pytest.LogCaptureFixture) -> None:
    fresh = WorkerDelta("eu", 5, 10, {"w": torch.tensor([1.0])})
    late = WorkerDelta("us", 4, 1000, {"w": torch.tensor([100.0])})
    with caplog.at_level(logging.WARNING, logger="burst.regional.outer"):
        avg = average_deltas([fresh, late], current_round=5)
    assert torch.equal(avg.mean["w"], torch.tensor([1.0]))
    assert avg.dropped == ("us",)
    assert "dropped the delta of us: computed from round 4, aggregating round 5" in caplog.text
    lenient = average_deltas([fresh, late], current_round=5, rule=StalenessRule(max_lag=1))
    assert lenient.dropped == ()
    assert lenient.mean["w"].item() == pytest.approx((10 * 1.0 + 1000 * 100.0) / 1010)
    with pytest.raises(ValueError, match="ahead of the aggregator's round 5"):
        average_deltas([WorkerDelta("eu", 6, 1, {"w": torch.zeros(1)})], current_round=5)


def test_no_usable_delta_gives_an_empty_mean_and_the_weights_stay() -> None:
    avg = average_deltas([WorkerDelta("eu", 1, 5, {"w": torch.ones(1)})], current_round=3)
    assert avg.mean == {} and avg.tokens == 0
    p = NesterovOuterOptimizer().step({"w": torch.ones(1)}, avg.mean)
    assert torch.equal(p["w"], torch.ones(1))


def _loss(w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ((x @ w - y) ** 2).mean()


def test_diloco_rounds_on_two_regional_shards_reduce_the_global_loss() -> None:
    """Two regions, each its own shard of one linear regression, AdamW inner steps, int8
    deltas, token-weighted average, Nesterov outer step: the global loss on both shards falls."""
    g = torch.Generator().manual_seed(21)
    true_w = torch.randn(8, 1, generator=g)
    shards = {}
    for region, n in (("eu", 64), ("us", 192)):
        x = torch.randn(n, 8, generator=g)
        shards[region] = (x, x @ true_w + 0.01 * torch.randn(n, 1, generator=g))
    all_x = torch.cat([s[0] for s in shards.values()])
    all_y = torch.cat([s[1] for s in shards.values()])
    global_w = {"w": torch.zeros(8, 1)}
    outer = NesterovOuterOptimizer()
    codecs = {r: Codec("int8", block_size=4) for r in shards}
    start = _loss(global_w["w"], all_x, all_y).item()
    for rnd in range(8):
        deltas = []
        for region, (x, y) in shards.items():
            w = torch.nn.Parameter(global_w["w"].clone())
            inner = torch.optim.AdamW([w], lr=0.05, weight_decay=0.0)
            for _ in range(10):
                inner.zero_grad()
                _loss(w, x, y).backward()
                inner.step()
            d = pseudo_gradient(global_w, {"w": w.detach()})
            sent = codecs[region].decode(codecs[region].encode(d))
            deltas.append(WorkerDelta(region, rnd, 10 * x.shape[0], sent))
        avg = average_deltas(deltas, current_round=rnd)
        global_w = outer.step(global_w, avg.mean)
    end = _loss(global_w["w"], all_x, all_y).item()
    assert end < 0.05 * start, (start, end)
