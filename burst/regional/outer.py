"""The outer loop of DiLoCo: averaging the workers' pseudo-gradients and the outer optimizer.

Source: Douillard et al., "DiLoCo: Distributed Low-Communication Training of Language Models",
arXiv 2311.08105 (2023), Algorithm 1 and section 3. Each worker i starts round t from the global
weights ``theta(t-1)``, takes H inner steps with AdamW on its own shard, and sends its
pseudo-gradient ``delta_i = theta(t-1) - theta_i(t)`` (global minus local). The outer optimizer
treats the average of the deltas as a gradient. The paper's defaults: Nesterov momentum with
outer learning rate 0.7 and momentum 0.9, inner AdamW, H = 500 inner steps per round.

The Nesterov update is PyTorch's ``torch.optim.SGD(nesterov=True)`` (the paper's setting):
``b = mu * b + g`` (``b = g`` on the first step), ``p = p - lr * (g + mu * b)``.

Averaging is weighted by tokens seen (issue 21): a region that trained on more tokens this round
counts more. Staleness rule (stated): a delta is accepted for round t only if it was computed
from the global weights of round ``t - max_lag`` or later; ``max_lag`` defaults to 0, so a late
delta from an older round is dropped (and logged), never applied to weights it was not computed
against. A delta claiming a future round is an error.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OuterSettings:
    """DiLoCo's published defaults (arXiv 2311.08105, section 3)."""

    lr: float = 0.7
    momentum: float = 0.9
    nesterov: bool = True
    inner_optimizer: str = "adamw"
    local_steps: int = 500  # H in the paper


DILOCO_DEFAULTS = OuterSettings()


@dataclass(frozen=True)
class WorkerDelta:
    """One region's contribution to a round: its pseudo-gradient (global minus local), the
    round whose global weights it started from, and the tokens it trained on since then."""

    region: str
    round: int
    tokens: int
    delta: dict[str, torch.Tensor]


@dataclass(frozen=True)
class StalenessRule:
    """Accept a delta for round t if ``t - max_lag <= delta.round <= t``."""

    max_lag: int = 0

    def accepts(self, delta_round: int, current_round: int) -> bool:
        if delta_round > current_round:
            raise ValueError(
                f"delta from round {delta_round} is ahead of the aggregator's round {current_round}"
            )
        return current_round - delta_round <= self.max_lag


DROP_STALE = StalenessRule(max_lag=0)  # the default: only deltas of the current round count


@dataclass(frozen=True)
class RoundAverage:
    """The token-weighted mean delta of a round and who contributed or was dropped."""

    mean: dict[str, torch.Tensor]
    tokens: int
    accepted: tuple[str, ...]
    dropped: tuple[str, ...]


def pseudo_gradient(
    global_params: dict[str, torch.Tensor], local_params: dict[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """``theta_global - theta_local`` for every parameter (float32)."""
    if global_params.keys() != local_params.keys():
        raise ValueError("global and local parameters name different tensors")
    return {
        k: global_params[k].detach().to(torch.float32) - local_params[k].detach().to(torch.float32)
        for k in global_params
    }


def average_deltas(
    deltas: Sequence[WorkerDelta],
    current_round: int,
    rule: StalenessRule = DROP_STALE,
) -> RoundAverage:
    """Token-weighted mean of the accepted deltas: ``sum_i n_i delta_i / sum_i n_i``."""
    accepted: list[WorkerDelta] = []
    dropped: list[str] = []
    for d in deltas:
        if rule.accepts(d.round, current_round):
            accepted.append(d)
            continue
        dropped.append(d.region)
        log.warning(
            "dropped the delta of %s: computed from round %d, aggregating round %d",
            d.region,
            d.round,
            current_round,
        )
    usable = [d for d in accepted if d.tokens > 0]
    if any(d.tokens < 0 for d in accepted):
        raise ValueError("a delta reports a negative token count")
    total = sum(d.tokens for d in usable)
    if not usable:
        return RoundAverage({}, 0, tuple(d.region for d in accepted), tuple(dropped))
    names = usable[0].delta.keys()
    for d in usable[1:]:
        if d.delta.keys() != names:
            raise ValueError(f"the delta of {d.region} names different tensors")
    mean = {
        k: sum((d.delta[k].to(torch.float64) * d.tokens for d in usable), torch.zeros(()))
        .div(total)
        .to(torch.float32)
        for k in names
    }
    return RoundAverage(mean, total, tuple(d.region for d in accepted), tuple(dropped))


@dataclass
class NesterovOuterOptimizer:
    """The outer optimizer; its momentum buffers are part of the aggregator's committed state
    (``state_dict``) so a restarted aggregator continues the same trajectory."""

    settings: OuterSettings = DILOCO_DEFAULTS
    momentum_buffers: dict[str, torch.Tensor] = field(default_factory=dict)

    def step(
        self, global_params: dict[str, torch.Tensor], outer_grad: dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        """New global weights; parameters without a gradient this round stay as they are."""
        lr, mu = self.settings.lr, self.settings.momentum
        out: dict[str, torch.Tensor] = {}
        for name, p in global_params.items():
            g = outer_grad.get(name)
            if g is None:
                out[name] = p.clone()
                continue
            g = g.to(torch.float32)
            buf = self.momentum_buffers.get(name)
            buf = g.clone() if buf is None else buf * mu + g
            self.momentum_buffers[name] = buf
            update = g + mu * buf if self.settings.nesterov else buf
            out[name] = (p.to(torch.float32) - lr * update).to(p.dtype)
        return out

    def state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.clone() for k, v in self.momentum_buffers.items()}

    def load_state_dict(self, state: dict[str, torch.Tensor]) -> None:
        self.momentum_buffers = {k: v.clone() for k, v in state.items()}
