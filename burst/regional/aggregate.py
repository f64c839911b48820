"""One aggregation round, in process: the aggregator's arithmetic without its storage.

Input: the global weights of round t, the outer optimizer (its momentum is aggregator state),
and the delta messages the workers committed (``DeltaMessage``: region, round, tokens, the
``compression.serialize`` bytes). Output: the global weights of round t + 1 and the update
message every worker applies to reach them.

Workers and aggregator must hold bit-identical global weights, or each worker's next
pseudo-gradient would be measured from weights the aggregator does not have. So the new
weights are not the outer optimizer's result itself but ``old + decode(encode(new - old))``:
the aggregator applies to its own copy exactly the compressed update it sends, and
``apply_update`` on a worker computes the same float32 sums. The compression error of the
downlink (at most half an int8 step per value) is dropped, not carried; that is stated in
docs/regional.md.

What this module does not do (later increments): read messages from the stores, wait for a
round deadline, commit the new global checkpoint through the checkpoint engine.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from burst.regional.compression import Codec, decode_delta, deserialize, serialize
from burst.regional.outer import (
    DROP_STALE,
    NesterovOuterOptimizer,
    StalenessRule,
    WorkerDelta,
    average_deltas,
    pseudo_gradient,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeltaMessage:
    """What one worker commits for a round: the serialized compressed pseudo-gradient."""

    region: str
    round: int
    tokens: int
    payload: bytes


@dataclass(frozen=True)
class RoundResult:
    params: dict[str, torch.Tensor]  # the global weights of round ``round``
    round: int
    update: bytes  # the serialized compressed update every worker applies
    tokens: int
    accepted: tuple[str, ...]
    dropped: tuple[str, ...]
    bytes_in: int  # delta bytes received this round (all messages, dropped ones too)

    @property
    def bytes_out(self) -> int:
        """Update bytes for one worker."""
        return len(self.update)


def make_message(
    region: str,
    round_: int,
    tokens: int,
    global_params: dict[str, torch.Tensor],
    local_params: dict[str, torch.Tensor],
    codec: Codec,
) -> DeltaMessage:
    """A worker's side of the round: pseudo-gradient (global - local), compressed, serialized."""
    enc = codec.encode(pseudo_gradient(global_params, local_params))
    return DeltaMessage(region, round_, tokens, serialize(enc))


def apply_update(params: dict[str, torch.Tensor], update: bytes) -> dict[str, torch.Tensor]:
    """``params + decode(update)`` in float32; names the update lacks stay as they are."""
    change = decode_delta(deserialize(update))
    unknown = change.keys() - params.keys()
    if unknown:
        raise ValueError(f"the update names tensors the model lacks: {sorted(unknown)}")
    return {
        k: (p.to(torch.float32) + change[k]).to(p.dtype) if k in change else p.clone()
        for k, p in params.items()
    }


def aggregate_round(
    global_params: dict[str, torch.Tensor],
    messages: Sequence[DeltaMessage],
    current_round: int,
    optimizer: NesterovOuterOptimizer,
    downlink: Codec | None = None,
    rule: StalenessRule = DROP_STALE,
) -> RoundResult:
    """Decode, apply the staleness rule, average by tokens, take the outer step, compress the
    change for the downlink and apply that same compressed change to the aggregator's copy."""
    deltas = [
        WorkerDelta(m.region, m.round, m.tokens, decode_delta(deserialize(m.payload)))
        for m in messages
    ]
    avg = average_deltas(deltas, current_round, rule)
    stepped = optimizer.step(global_params, avg.mean)
    change = {
        k: stepped[k].to(torch.float32) - global_params[k].to(torch.float32) for k in avg.mean
    }
    codec = downlink if downlink is not None else Codec("int8")
    update = serialize(codec.encode(change))
    new_params = apply_update(global_params, update)
    log.info(
        "round %d: %d deltas accepted (%d tokens), %d dropped",
        current_round,
        len(avg.accepted),
        avg.tokens,
        len(avg.dropped),
    )
    return RoundResult(
        params=new_params,
        round=current_round + 1,
        update=update,
        tokens=avg.tokens,
        accepted=avg.accepted,
        dropped=avg.dropped,
        bytes_in=sum(len(m.payload) for m in messages),
    )
