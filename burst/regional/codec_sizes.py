"""What a pseudo-gradient weighs under each codec of :mod:`burst.regional.compression`,
without torch: the planner (the plan step, in the torch-less steps image) counts bytes with
these; the codecs themselves need torch. (The plan step imported torch through here and
failed in the steps image: found by ``burst run --containers``.)"""

from __future__ import annotations

import math
from typing import Literal

CodecName = Literal["int8", "topk", "none"]
CODECS: tuple[CodecName, ...] = ("int8", "topk", "none")
DEFAULT_BLOCK_SIZE = 256
DEFAULT_TOPK_FRACTION = 0.01
INT8_MAX = 127


def int8_bytes(numel: int, block_size: int = DEFAULT_BLOCK_SIZE) -> int:
    """Payload of one tensor under ``int8``: one byte a value plus a float32 scale a block."""
    return numel + 4 * math.ceil(numel / block_size)


def topk_keep(numel: int, fraction: float) -> int:
    """How many values ``topk`` keeps of ``numel`` (at least one of a non-empty tensor)."""
    return min(numel, max(1, math.ceil(fraction * numel))) if numel else 0


def topk_bytes(numel: int, fraction: float = DEFAULT_TOPK_FRACTION) -> int:
    """Payload of one tensor under ``topk``: an int32 index and a float32 value per kept value."""
    return 8 * topk_keep(numel, fraction)


def none_bytes(numel: int) -> int:
    return 4 * numel


def bytes_per_value(
    codec: CodecName,
    block_size: int = DEFAULT_BLOCK_SIZE,
    topk_fraction: float = DEFAULT_TOPK_FRACTION,
) -> float:
    """Average payload bytes per parameter, for the planner (large tensors)."""
    if codec == "int8":
        return 1.0 + 4.0 / block_size
    if codec == "topk":
        return 8.0 * topk_fraction
    if codec == "none":
        return 4.0
    raise ValueError(f"unknown codec {codec!r}; expected one of {', '.join(CODECS)}")
