"""Plan estimates for hybrid cross-region training: pure functions, seconds, decimal GB, USD.

Topology (stated): a star. One region hosts the aggregator (and its own worker, whose delta
never crosses a region); every other region has its own link to the aggregation region with
seed 002's bandwidth, latency and price for that span (``burst.plan.crossregion.Link``, the
catalog's ``links``). A round is H local steps of compute, then the sync:

* upload: every remote worker sends its compressed delta at once over its own link; the phase
  lasts as long as the slowest, ``max_i (up / b_i + latency_i)``;
* download: the aggregator sends the new global update, compressed the same way, back to every
  remote worker, ``max_i (down / b_i + latency_i)``.

The sync is not overlapped with compute (DiLoCo's basic form), so the run's wall time is
``rounds x (H x t_step + t_sync)``. Bytes that cross regions per round are
``sum_i (up + down)``; egress is priced per link (seed 002's ``C_comm = sum data_ij c_ij``).

The comparison is seed 002's synchronous data parallelism across the same regions (one
data-parallel group per region, ring all-reduce every step over the slowest link), through
``burst.plan.crossregion`` itself: ``dp_iteration_time`` and ``dp_bytes_per_iteration``.
Equal tokens: both do the same number of steps in every region.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from burst.plan.cost import BYTES_PER_GB
from burst.plan.crossregion import Link, ModelProfile, dp_bytes_per_iteration, dp_iteration_time
from burst.regional.codec_sizes import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_TOPK_FRACTION,
    CodecName,
    int8_bytes,
    none_bytes,
    topk_bytes,
)
from burst.regional.rounds import Rounds

DEFAULT_SYNC_FRACTION = 0.1  # sync time at most 10 % of a round's compute time


def delta_bytes(
    tensor_sizes: Sequence[int],
    codec: CodecName = "int8",
    block_size: int = DEFAULT_BLOCK_SIZE,
    topk_fraction: float = DEFAULT_TOPK_FRACTION,
) -> int:
    """Exact payload bytes of one compressed delta of tensors with these element counts
    (the same counts as ``compression.EncodedDelta.payload_bytes``)."""
    if codec == "int8":
        return sum(int8_bytes(n, block_size) for n in tensor_sizes)
    if codec == "topk":
        return sum(topk_bytes(n, topk_fraction) for n in tensor_sizes)
    if codec == "none":
        return sum(none_bytes(n) for n in tensor_sizes)
    raise ValueError(f"unknown codec {codec!r}")


@dataclass(frozen=True)
class RoundTraffic:
    bytes_crossing: int  # bytes that cross a region boundary in one round (all links)
    egress_usd: float
    upload_s: float
    download_s: float

    @property
    def sync_s(self) -> float:
        return self.upload_s + self.download_s


def round_traffic(up_bytes: int, down_bytes: int, remote_links: Sequence[Link]) -> RoundTraffic:
    """One round's sync over the star (see the module docstring). No remote link: nothing
    crosses (every worker sits in the aggregation region)."""
    if any(ln.gb_per_s <= 0 for ln in remote_links):
        raise ValueError("link bandwidth must be > 0")
    if not remote_links:
        return RoundTraffic(0, 0.0, 0.0, 0.0)
    up_gb, down_gb = up_bytes / BYTES_PER_GB, down_bytes / BYTES_PER_GB
    upload = max(up_gb / ln.gb_per_s + ln.latency_s for ln in remote_links)
    download = max(down_gb / ln.gb_per_s + ln.latency_s for ln in remote_links)
    egress = sum((up_gb + down_gb) * ln.usd_per_gb for ln in remote_links)
    return RoundTraffic(len(remote_links) * (up_bytes + down_bytes), egress, upload, download)


def local_step_time(prof: ModelProfile) -> float:
    """One optimizer step on one region's workers, no communication across regions:
    ``(t_f + t_b) x ga + t_u`` (seed 002's DP formula with an infinitely fast link)."""
    return (prof.t_f + prof.t_b) * prof.microbatches + prof.t_u


def choose_local_steps(
    sync_s: float, step_s: float, max_fraction: float = DEFAULT_SYNC_FRACTION
) -> int:
    """Smallest H with ``sync_s <= max_fraction x H x step_s`` (at least 1)."""
    if max_fraction <= 0 or step_s <= 0:
        raise ValueError("max_fraction and the step time must be > 0")
    return max(1, math.ceil(sync_s / (max_fraction * step_s) - 1e-12))


def choose_first_local_steps(
    sync_s: float, step_s: float, local_steps: int, max_fraction: float = DEFAULT_SYNC_FRACTION
) -> int | None:
    """The planner's round schedule below H (issue 31): the first round is the shortest one
    whose sync stays under ``max_fraction`` of its compute (``choose_local_steps``), and each
    later round doubles it up to H (``burst.regional.rounds``), so every round keeps the sync
    fraction and the rounds are short only while the spec's H allows shorter ones. None (every
    round H) when that shortest round is H or longer: the planner's own H is already the
    shortest, so with ``local_steps`` null the schedule is constant."""
    shortest = choose_local_steps(sync_s, step_s, max_fraction)
    return shortest if shortest < local_steps else None


@dataclass(frozen=True)
class Comparison:
    """Hybrid regional training against synchronous DP over the same regions, same steps."""

    steps: int
    local_steps: int
    rounds: int
    regional_bytes: float
    regional_egress_usd: float
    regional_wall_s: float
    dp_bytes: float
    dp_egress_usd: float
    dp_wall_s: float

    @property
    def bytes_ratio(self) -> float:
        return self.regional_bytes / self.dp_bytes if self.dp_bytes else math.inf

    @property
    def wall_ratio(self) -> float:
        return self.regional_wall_s / self.dp_wall_s

    @property
    def egress_ratio(self) -> float:
        return self.regional_egress_usd / self.dp_egress_usd if self.dp_egress_usd else math.inf


def dp_step_time(prof: ModelProfile, n: int, link: Link) -> float:
    """One step of synchronous DP over ``n`` regions: seed 002's formula with the all-reduce
    ``2 (N - 1) M / (N b)`` plus the ring's ``2 (N - 1)`` messages in sequence, each paying the
    link's latency (seed 002's formula has no latency term; its table gives the latency).
    With N = 1 nothing crosses: the local step."""
    if n <= 1:
        return local_step_time(prof)
    hops = 2 * (n - 1)
    compute = prof.t_f + prof.t_b
    allreduce = dp_iteration_time(0.0, 0.0, 1, n, prof.grad_gb, link.gb_per_s, 0.0)
    allreduce += hops * link.latency_s
    return compute * (prof.microbatches - 1) + max(compute, allreduce) + prof.t_u


def compare_with_sync_dp(
    prof: ModelProfile,
    remote_links: Sequence[Link],
    traffic: RoundTraffic,
    local_steps: int,
    steps: int,
    first_local_steps: int | None = None,
) -> Comparison:
    """Both run ``steps`` optimizer steps in each of ``len(remote_links) + 1`` regions.
    DP all-reduces ``prof.grad_gb`` every step over the slowest link (seed 002, plus the ring's
    latencies: ``dp_step_time``); a ring over N regions crosses a boundary on every hop,
    ``N x 2 (N - 1) M / N`` GB per step."""
    if local_steps < 1 or steps < 1:
        raise ValueError("local steps and steps must be >= 1")
    n = len(remote_links) + 1
    rounds = Rounds(steps, local_steps, first_local_steps).count  # adaptive rounds: more
    regional_wall = steps * local_step_time(prof) + rounds * traffic.sync_s
    if remote_links:
        slowest = min(remote_links, key=lambda ln: ln.gb_per_s)
        t_dp = dp_step_time(prof, n, slowest)
        dp_gb = n * dp_bytes_per_iteration(n, prof.grad_gb)
        dp_usd = dp_gb * slowest.usd_per_gb
    else:
        t_dp, dp_gb, dp_usd = local_step_time(prof), 0.0, 0.0
    return Comparison(
        steps=steps,
        local_steps=local_steps,
        rounds=rounds,
        regional_bytes=float(rounds * traffic.bytes_crossing),
        regional_egress_usd=rounds * traffic.egress_usd,
        regional_wall_s=regional_wall,
        dp_bytes=steps * dp_gb * BYTES_PER_GB,
        dp_egress_usd=steps * dp_usd,
        dp_wall_s=steps * t_dp,
    )


@dataclass(frozen=True)
class RegionalPlan:
    """The planner's answer for one regional layout: H, per-round figures, the run's totals
    and the comparison with synchronous DP. ``to_dict`` is the plan document's shape."""

    codec: CodecName
    delta_bytes: int
    traffic: RoundTraffic
    comparison: Comparison
    max_sync_fraction: float
    first_local_steps: int | None = None  # adaptive rounds (given or chosen); None: constant

    def to_dict(self) -> dict[str, float | int | str | None]:
        c, t = self.comparison, self.traffic
        return {
            "codec": self.codec,
            "local_steps": c.local_steps,
            "first_local_steps": self.first_local_steps,
            "rounds": c.rounds,
            "delta_bytes": self.delta_bytes,
            "bytes_per_round": t.bytes_crossing,
            "egress_usd_per_round": t.egress_usd,
            "sync_s_per_round": t.sync_s,
            "max_sync_fraction": self.max_sync_fraction,
            "bytes_over_run": c.regional_bytes,
            "egress_usd_over_run": c.regional_egress_usd,
            "wall_s": c.regional_wall_s,
            "sync_dp_bytes": c.dp_bytes,
            "sync_dp_egress_usd": c.dp_egress_usd,
            "sync_dp_wall_s": c.dp_wall_s,
            "bytes_ratio": c.bytes_ratio,
            "wall_ratio": c.wall_ratio,
        }


def plan_regional(
    prof: ModelProfile,
    tensor_sizes: Sequence[int],
    remote_links: Sequence[Link],
    steps: int,
    codec: CodecName = "int8",
    max_sync_fraction: float = DEFAULT_SYNC_FRACTION,
    local_steps: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    topk_fraction: float = DEFAULT_TOPK_FRACTION,
    first_local_steps: int | None = None,
    choose_first: bool = False,
) -> RegionalPlan:
    """Bytes of one delta, one round's traffic (the downlink compressed the same way), H chosen
    so the sync stays under ``max_sync_fraction`` of a round's compute (unless given), and the
    comparison with synchronous DP over the same regions for ``steps`` steps; with
    ``first_local_steps`` the rounds are adaptive (``burst.regional.rounds``): more of them,
    each one's bytes counted. ``choose_first`` (and no ``first_local_steps``): the planner
    picks the first round (``choose_first_local_steps``)."""
    size = delta_bytes(tensor_sizes, codec, block_size, topk_fraction)
    traffic = round_traffic(size, size, remote_links)
    step_s = local_step_time(prof)
    h = local_steps or choose_local_steps(traffic.sync_s, step_s, max_sync_fraction)
    first = first_local_steps
    if first is None and choose_first and remote_links:
        first = choose_first_local_steps(traffic.sync_s, step_s, h, max_sync_fraction)
    comparison = compare_with_sync_dp(prof, remote_links, traffic, h, steps, first)
    return RegionalPlan(codec, size, traffic, comparison, max_sync_fraction, first)
