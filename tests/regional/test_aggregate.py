"""One aggregation round through the wire form: workers and aggregator stay bit-identical,
late deltas are dropped, a restarted aggregator continues the same trajectory."""

from __future__ import annotations

import pytest
import torch

from burst.regional.aggregate import (
    DeltaMessage,
    aggregate_round,
    apply_update,
    make_message,
)
from burst.regional.compression import Codec, serialize
from burst.regional.outer import NesterovOuterOptimizer, StalenessRule


def _params(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {"a": torch.randn(33, 7, generator=g), "b": torch.randn(5, generator=g)}


def _local(global_params: dict[str, torch.Tensor], seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + 0.01 * torch.randn(v.shape, generator=g) for k, v in global_params.items()}


def test_workers_applying_the_update_hold_the_aggregators_weights_bit_for_bit() -> None:
    global_params = _params(0)
    msgs = [
        make_message("eu", 0, 100, global_params, _local(global_params, 1), Codec()),
        make_message("us", 0, 300, global_params, _local(global_params, 2), Codec()),
    ]
    res = aggregate_round(global_params, msgs, 0, NesterovOuterOptimizer())
    worker_copy = apply_update(global_params, res.update)
    for k in global_params:
        assert torch.equal(worker_copy[k], res.params[k])
        assert not torch.equal(res.params[k], global_params[k])
    assert res.round == 1 and res.tokens == 400
    assert res.accepted == ("eu", "us") and res.dropped == ()
    assert res.bytes_in == sum(len(m.payload) for m in msgs)
    assert res.bytes_out == len(res.update)


def test_uncompressed_round_equals_the_outer_step_on_the_weighted_mean() -> None:
    global_params = _params(3)
    locals_ = {"eu": _local(global_params, 4), "us": _local(global_params, 5)}
    tokens = {"eu": 1, "us": 3}
    msgs = [
        make_message(r, 2, tokens[r], global_params, p, Codec("none")) for r, p in locals_.items()
    ]
    res = aggregate_round(global_params, msgs, 2, NesterovOuterOptimizer(), Codec("none"))
    for k, p in global_params.items():
        mean = sum(tokens[r] * (p - locals_[r][k]) for r in locals_) / 4
        # First outer step: b = g, p - 0.7 (g + 0.9 g).
        expected = p - 0.7 * 1.9 * mean
        assert torch.allclose(res.params[k], expected, atol=1e-6)


def test_a_late_delta_is_dropped_and_does_not_move_the_weights() -> None:
    global_params = _params(6)
    fresh = make_message("eu", 4, 10, global_params, _local(global_params, 7), Codec("none"))
    late = make_message("us", 3, 10, global_params, _local(global_params, 8), Codec("none"))
    only = aggregate_round(global_params, [fresh], 4, NesterovOuterOptimizer(), Codec("none"))
    both = aggregate_round(global_params, [fresh, late], 4, NesterovOuterOptimizer(), Codec("none"))
    assert both.dropped == ("us",) and both.accepted == ("eu",)
    for k in global_params:
        assert torch.equal(both.params[k], only.params[k])
    lenient = aggregate_round(
        global_params,
        [fresh, late],
        4,
        NesterovOuterOptimizer(),
        Codec("none"),
        StalenessRule(max_lag=1),
    )
    assert lenient.dropped == ()


def test_a_round_without_usable_deltas_keeps_the_weights() -> None:
    global_params = _params(9)
    late = make_message("us", 0, 10, global_params, _local(global_params, 10), Codec())
    res = aggregate_round(global_params, [late], 5, NesterovOuterOptimizer())
    for k in global_params:
        assert torch.equal(res.params[k], global_params[k])
    assert res.round == 6 and res.tokens == 0


def test_restarted_aggregator_continues_the_same_trajectory() -> None:
    """Killed between rounds 1 and 2: it reloads the committed weights and momentum."""
    start = _params(11)

    def messages(params: dict[str, torch.Tensor], rnd: int) -> list[DeltaMessage]:
        return [
            make_message("eu", rnd, 50, params, _local(params, 100 + rnd), Codec()),
            make_message("ap", rnd, 70, params, _local(params, 200 + rnd), Codec()),
        ]

    opt = NesterovOuterOptimizer()
    r1 = aggregate_round(start, messages(start, 0), 0, opt)
    committed_params = {k: v.clone() for k, v in r1.params.items()}
    committed_state = opt.state_dict()
    r2 = aggregate_round(r1.params, messages(r1.params, 1), 1, opt)

    restarted = NesterovOuterOptimizer()
    restarted.load_state_dict(committed_state)
    r2b = aggregate_round(committed_params, messages(committed_params, 1), 1, restarted)
    for k in start:
        assert torch.equal(r2b.params[k], r2.params[k])


def test_an_update_for_another_model_is_refused() -> None:
    update = serialize(Codec("none").encode({"zzz": torch.ones(2)}))
    with pytest.raises(ValueError, match="lacks: \\['zzz'\\]"):
        apply_update(_params(0), update)
