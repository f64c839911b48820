"""Codecs of the pseudo-gradient: error bounds, error feedback, exact byte counts, wire form."""

from __future__ import annotations

import math

import pytest
import torch

from burst.regional.compression import (
    Codec,
    decode_delta,
    decode_int8,
    deserialize,
    encode_int8,
    int8_bytes,
    serialize,
    topk_bytes,
    topk_keep,
)

SEEDS = (0, 1, 2)


def _delta(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "emb.weight": torch.randn(37, 19, generator=g),  # 703 values: not a multiple of 256
        "layer.bias": torch.randn(5, generator=g) * 1e-3,
        "head.weight": torch.randn(256, generator=g) * 50.0,
        "frozen": torch.zeros(300),
    }


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("block", [1, 7, 64, 256, 4096])
def test_int8_error_is_at_most_half_a_step_per_block(seed: int, block: int) -> None:
    for x in _delta(seed).values():
        enc = encode_int8(x, block)
        y = decode_int8(enc)
        assert y.shape == x.shape
        flat_err = (x - y).abs().reshape(-1)
        scales = enc.buffers["scales"].repeat_interleave(block)[: x.numel()]
        # Half a quantisation step, plus float32 rounding of the product.
        assert torch.all(flat_err <= scales / 2 + 1e-6 * x.abs().reshape(-1) + 1e-12)
        # The largest value of each block is represented exactly up to float rounding.
        blocks = math.ceil(x.numel() / block)
        assert enc.buffers["scales"].numel() == blocks


def test_int8_of_zeros_is_zeros_and_large_values_do_not_overflow() -> None:
    x = torch.zeros(10)
    assert torch.equal(decode_int8(encode_int8(x, 4)), x)
    big = torch.tensor([3.0e30, -3.0e30, 1.0, 0.0])
    y = decode_int8(encode_int8(big, 4))
    assert torch.all(torch.isfinite(y))
    assert y[0].item() == pytest.approx(3.0e30, rel=1e-6)
    assert y[1].item() == pytest.approx(-3.0e30, rel=1e-6)


@pytest.mark.parametrize("name", ["int8", "topk", "none"])
@pytest.mark.parametrize("seed", SEEDS)
def test_payload_and_wire_bytes_are_exact(name: str, seed: int) -> None:
    delta = _delta(seed)
    codec = Codec(name, block_size=64, topk_fraction=0.05)  # type: ignore[arg-type]
    enc = codec.encode(delta)
    expected = {
        "int8": sum(int8_bytes(x.numel(), 64) for x in delta.values()),
        "topk": sum(topk_bytes(x.numel(), 0.05) for x in delta.values()),
        "none": sum(4 * x.numel() for x in delta.values()),
    }[name]
    assert enc.payload_bytes == expected
    wire = serialize(enc)
    head_len = int.from_bytes(wire[:4], "big")
    assert len(wire) == 4 + head_len + expected == enc.wire_bytes
    back = deserialize(wire)
    assert back.payload_bytes == expected
    for k, v in decode_delta(back).items():
        assert torch.equal(v, decode_delta(enc)[k])


def test_none_is_lossless() -> None:
    delta = _delta(3)
    codec = Codec("none")
    for k, v in codec.decode(codec.encode(delta)).items():
        assert torch.equal(v, delta[k])


def test_topk_keeps_the_largest_values() -> None:
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3, 0.0, 4.0, 0.05])
    codec = Codec("topk", topk_fraction=3 / 8)
    enc = codec.encode({"w": x})
    assert topk_keep(8, 3 / 8) == 3
    y = codec.decode(enc)["w"]
    assert torch.equal(y, torch.tensor([0.0, -5.0, 0.0, 3.0, 0.0, 0.0, 4.0, 0.0]))


@pytest.mark.parametrize("seed", SEEDS)
def test_error_feedback_carries_exactly_what_topk_dropped(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    codec = Codec("topk", topk_fraction=0.1)
    total_in = torch.zeros(500)
    total_sent = torch.zeros(500)
    residual = torch.zeros(500)
    for _ in range(6):
        d = torch.randn(500, generator=g)
        sent = codec.decode(codec.encode({"w": d}))["w"]
        new_residual = codec.residual["w"]
        # Kept positions leave no residual; dropped ones keep everything (exact).
        assert torch.equal(sent + new_residual, d + residual)
        assert int((sent != 0).sum()) == 50
        total_in += d
        total_sent += sent
        residual = new_residual
    assert torch.allclose(total_sent + residual, total_in, atol=1e-5)


def test_error_feedback_accumulates_a_small_persistent_component_until_it_is_sent() -> None:
    d = torch.tensor([10.0, 1.0, 2.0, 3.0])
    codec = Codec("topk", topk_fraction=0.25)  # one value a round
    sent_rounds = []
    for r in range(1, 41):
        sent = codec.decode(codec.encode({"w": d}))["w"]
        sent_rounds.append(sent)
        if r == 2:
            assert torch.equal(codec.residual["w"][1:], torch.tensor([2.0, 4.0, 6.0]))
    # Without memory indices 1..3 would never travel (10 always wins); with it each does, and
    # nothing is lost: what was sent plus what is still carried is 40 rounds of the delta.
    sent_total = torch.stack(sent_rounds).sum(dim=0)
    assert torch.all(sent_total[1:] > 0)
    assert torch.allclose(sent_total + codec.residual["w"], 40 * d)


@pytest.mark.parametrize("seed", SEEDS)
def test_int8_error_feedback_carries_the_quantisation_error(seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    plain, fed = Codec("int8", block_size=64), Codec("int8", block_size=64, error_feedback=True)
    total_in, total_sent, residual = torch.zeros(300), torch.zeros(300), torch.zeros(300)
    for _ in range(5):
        d = torch.randn(300, generator=g)
        enc = fed.encode({"w": d})
        sent = fed.decode(enc)["w"]
        # what travels is the int8 form of delta + carried error; the new error is what it missed,
        # at most half a step of its block
        assert torch.allclose(sent + fed.residual["w"], d + residual, atol=1e-6)
        steps = enc.tensors["w"].buffers["scales"].repeat_interleave(64)[:300]
        assert torch.all(fed.residual["w"].abs() <= steps / 2 + 1e-6)
        total_in += d
        total_sent += sent
        residual = fed.residual["w"]
    assert torch.allclose(total_sent + residual, total_in, atol=1e-5)
    plain.encode({"w": total_in})
    assert plain.residual == {}  # the default int8 codec carries nothing


def test_bad_codec_and_malformed_messages_are_value_errors() -> None:
    with pytest.raises(ValueError, match="unknown codec 'fp4'"):
        Codec("fp4")  # type: ignore[arg-type]
    wire = serialize(Codec("int8").encode(_delta(0)))
    with pytest.raises(ValueError, match="truncated"):
        deserialize(wire[:-10])
    with pytest.raises(ValueError, match="trailing"):
        deserialize(wire + b"x")
    with pytest.raises(ValueError, match="shorter"):
        deserialize(b"\x00")
