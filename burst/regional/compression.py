"""Compression of a pseudo-gradient (a dict of tensors) for the trip to the aggregator.

Three codecs, chosen by name:

* ``int8`` (default): each tensor is flattened and cut into blocks of ``block_size`` values;
  each block keeps one float32 scale ``max|x| / 127`` and int8 values ``round(x / scale)``.
  The error of every value is at most half a step, ``scale / 2``. INTELLECT-1 (Prime
  Intellect, arXiv 2412.01152) sends int8 outer gradients the same way.
* ``topk``: keeps the ``fraction`` of values of largest magnitude (int32 index + float32
  value each). What it drops is not lost: the codec carries it as a residual that is added to
  the next round's delta before selection (error feedback, Stich et al. NeurIPS '18
  "Sparsified SGD with memory"), so ``sent + new_residual == delta + old_residual`` exactly.
* ``none``: the float32 values as they are.

Bytes are counted exactly: ``EncodedTensor.payload_bytes`` is the sum of the buffers that
travel, and ``serialize`` produces the wire form whose length ``wire_bytes`` reports (a small
JSON header naming the tensors, shapes and codec, then the buffers).
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field

import torch

from burst.regional.codec_sizes import (
    CODECS,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_TOPK_FRACTION,
    INT8_MAX,
    CodecName,
    bytes_per_value,
    int8_bytes,
    none_bytes,
    topk_bytes,
    topk_keep,
)

__all__ = [
    "CODECS",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_TOPK_FRACTION",
    "INT8_MAX",
    "CodecName",
    "bytes_per_value",
    "int8_bytes",
    "none_bytes",
    "topk_bytes",
    "topk_keep",
]


@dataclass(frozen=True)
class EncodedTensor:
    """One compressed tensor: its shape and the buffers that travel."""

    codec: CodecName
    shape: tuple[int, ...]
    buffers: dict[str, torch.Tensor]
    block_size: int = 0  # int8 only: values per scale

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def payload_bytes(self) -> int:
        return sum(b.numel() * b.element_size() for b in self.buffers.values())


@dataclass(frozen=True)
class EncodedDelta:
    """A compressed pseudo-gradient: one ``EncodedTensor`` per parameter name."""

    codec: CodecName
    tensors: dict[str, EncodedTensor]

    @property
    def payload_bytes(self) -> int:
        return sum(t.payload_bytes for t in self.tensors.values())

    @property
    def wire_bytes(self) -> int:
        return len(serialize(self))


def encode_int8(x: torch.Tensor, block_size: int = DEFAULT_BLOCK_SIZE) -> EncodedTensor:
    if block_size < 1:
        raise ValueError("block_size must be >= 1")
    flat = x.detach().reshape(-1).to(torch.float32)
    n = flat.numel()
    blocks = math.ceil(n / block_size)
    padded = torch.zeros(blocks * block_size, dtype=torch.float32)
    padded[:n] = flat
    view = padded.view(blocks, block_size)
    scales = view.abs().amax(dim=1) / INT8_MAX
    safe = torch.where(scales > 0, scales, torch.ones_like(scales))
    q = torch.round(view / safe[:, None]).clamp(-INT8_MAX, INT8_MAX).to(torch.int8)
    return EncodedTensor(
        "int8",
        tuple(x.shape),
        {"values": q.reshape(-1)[:n].clone(), "scales": scales},
        block_size,
    )


def decode_int8(enc: EncodedTensor) -> torch.Tensor:
    q = enc.buffers["values"].to(torch.float32)
    scales = enc.buffers["scales"]
    n = q.numel()
    per_value = scales.repeat_interleave(enc.block_size)[:n]
    return (q * per_value).reshape(enc.shape)


def encode_none(x: torch.Tensor) -> EncodedTensor:
    flat = x.detach().reshape(-1).to(torch.float32).clone()
    return EncodedTensor("none", tuple(x.shape), {"values": flat})


def decode_none(enc: EncodedTensor) -> torch.Tensor:
    return enc.buffers["values"].reshape(enc.shape).clone()


def encode_topk(x: torch.Tensor, fraction: float = DEFAULT_TOPK_FRACTION) -> EncodedTensor:
    """Top-k without memory; ``ErrorFeedback`` wraps it with the residual."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError("topk fraction must be in (0, 1]")
    flat = x.detach().reshape(-1).to(torch.float32)
    k = topk_keep(flat.numel(), fraction)
    idx = torch.topk(flat.abs(), k, sorted=False).indices if k else torch.zeros(0, dtype=torch.long)
    idx, _ = torch.sort(idx)
    return EncodedTensor(
        "topk",
        tuple(x.shape),
        {"indices": idx.to(torch.int32), "values": flat[idx].clone()},
    )


def decode_topk(enc: EncodedTensor) -> torch.Tensor:
    out = torch.zeros(enc.numel, dtype=torch.float32)
    out[enc.buffers["indices"].to(torch.long)] = enc.buffers["values"]
    return out.reshape(enc.shape)


@dataclass
class Codec:
    """A named codec with its settings; ``topk`` keeps its error-feedback residual here, so one
    worker keeps one ``Codec`` across rounds (its residual is part of the worker's state)."""

    name: CodecName = "int8"
    block_size: int = DEFAULT_BLOCK_SIZE
    topk_fraction: float = DEFAULT_TOPK_FRACTION
    residual: dict[str, torch.Tensor] = field(default_factory=dict)
    error_feedback: bool = False  # int8: carry the quantisation error too (topk always does)

    def __post_init__(self) -> None:
        if self.name not in CODECS:
            raise ValueError(f"unknown codec {self.name!r}; expected one of {', '.join(CODECS)}")

    def encode(self, delta: dict[str, torch.Tensor]) -> EncodedDelta:
        out: dict[str, EncodedTensor] = {}
        for name, x in delta.items():
            if self.name == "int8" and not self.error_feedback:
                out[name] = encode_int8(x, self.block_size)
            elif self.name == "int8":
                corrected = x.detach().to(torch.float32) + self.residual.get(
                    name, torch.zeros(x.shape, dtype=torch.float32)
                )
                enc8 = encode_int8(corrected, self.block_size)
                self.residual[name] = corrected - decode_int8(enc8)
                out[name] = enc8
            elif self.name == "none":
                out[name] = encode_none(x)
            else:
                corrected = x.detach().to(torch.float32) + self.residual.get(
                    name, torch.zeros(x.shape, dtype=torch.float32)
                )
                enc = encode_topk(corrected, self.topk_fraction)
                self.residual[name] = corrected - decode_topk(enc)
                out[name] = enc
        return EncodedDelta(self.name, out)

    def decode(self, enc: EncodedDelta) -> dict[str, torch.Tensor]:
        return decode_delta(enc)


def decode_delta(enc: EncodedDelta) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, t in enc.tensors.items():
        if t.codec == "int8":
            out[name] = decode_int8(t)
        elif t.codec == "topk":
            out[name] = decode_topk(t)
        else:
            out[name] = decode_none(t)
    return out


_BUFFER_DTYPES: dict[str, torch.dtype] = {
    "int8": torch.int8,
    "float32": torch.float32,
    "int32": torch.int32,
}


def _dtype_name(t: torch.Tensor) -> str:
    for name, dt in _BUFFER_DTYPES.items():
        if t.dtype == dt:
            return name
    raise ValueError(f"unexpected buffer dtype {t.dtype}")


def serialize(enc: EncodedDelta) -> bytes:
    """Wire form: 4-byte big-endian header length, the JSON header, then every buffer's raw
    little-endian bytes in header order."""
    header: list[dict[str, object]] = []
    blobs: list[bytes] = []
    for name, t in enc.tensors.items():
        bufs = []
        for key, b in t.buffers.items():
            bufs.append({"key": key, "dtype": _dtype_name(b), "numel": b.numel()})
            blobs.append(b.contiguous().numpy().tobytes())
        header.append(
            {
                "name": name,
                "codec": t.codec,
                "shape": list(t.shape),
                "block_size": t.block_size,
                "buffers": bufs,
            }
        )
    head = json.dumps({"codec": enc.codec, "tensors": header}, separators=(",", ":")).encode()
    return struct.pack(">I", len(head)) + head + b"".join(blobs)


def deserialize(data: bytes) -> EncodedDelta:
    """Inverse of ``serialize``; raises ``ValueError`` on a truncated or malformed message."""
    if len(data) < 4:
        raise ValueError("delta message shorter than its header length")
    (hlen,) = struct.unpack(">I", data[:4])
    try:
        head = json.loads(data[4 : 4 + hlen])
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ValueError(f"delta message header is not JSON: {exc}") from exc
    pos = 4 + hlen
    tensors: dict[str, EncodedTensor] = {}
    for th in head["tensors"]:
        bufs: dict[str, torch.Tensor] = {}
        for bh in th["buffers"]:
            dt = _BUFFER_DTYPES[bh["dtype"]]
            size = bh["numel"] * torch.empty(0, dtype=dt).element_size()
            if pos + size > len(data):
                raise ValueError(f"delta message truncated in tensor {th['name']!r}")
            raw = bytearray(data[pos : pos + size])
            bufs[bh["key"]] = (
                torch.frombuffer(raw, dtype=dt).clone() if size else torch.zeros(0, dtype=dt)
            )
            pos += size
        tensors[th["name"]] = EncodedTensor(
            th["codec"], tuple(th["shape"]), bufs, int(th["block_size"])
        )
    if pos != len(data):
        raise ValueError(f"delta message has {len(data) - pos} trailing bytes")
    return EncodedDelta(head["codec"], tensors)
