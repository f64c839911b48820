"""Seed 002's estimators: iteration time and cost of data, pipeline and 2D parallelism across
zones, regions and continents (Strati et al., EuroMLSys '24).

Units: seconds, GB, GB/s, USD. ``M`` is the size of the gradients (GB) that data parallelism
all-reduces each iteration.

* Data parallelism over N workers, ring all-reduce overlapped with the last micro-batch:
  ``T = (t_f + t_b)(ga - 1) + max(t_f + t_b, 2 (N - 1) M / (N b)) + t_u``
* Pipeline parallelism, 1F1B (the AMP cost model, Li et al. NeurIPS '22): with m micro-batches
  and stages i of compute ``t_i = t_f,i + t_b,i`` linked by transfers ``c_j`` (activations
  forward and gradients back, ``2 a / b_j`` plus two latencies):
  ``t_pp = (m - 1) max(max_i t_i, max_j c_j) + sum_i t_i + sum_j c_j + t_u``
* Data + pipeline parallelism, D pipelines of P stages:
  ``t_iter = t_pp + 2 (D - 1) M / (D P b_min)``
* Cost: ``C_comp = t_iter x sum_i num_vm_i cost_i`` (per hour prices / 3600),
  ``C_comm = sum_ij data_ij c_ij``; total = C_comp + C_comm.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Link:
    """One link class of seed 002's table."""

    gb_per_s: float
    latency_ms: float
    usd_per_gb: float

    @property
    def latency_s(self) -> float:
        return self.latency_ms / 1000.0


# Seed 002's table (also in the catalog's ``links``), for tests and callers without a catalog.
SEED_002_LINKS: dict[str, Link] = {
    "same_az": Link(1.45, 1.0, 0.0),
    "cross_az": Link(1.42, 0.9, 0.01),
    "cross_region": Link(0.63, 31.0, 0.02),
    "cross_continent": Link(0.18, 102.0, 0.05),
}
SPANS = ("same_az", "cross_az", "cross_region", "cross_continent")


def dp_iteration_time(
    t_f: float, t_b: float, ga: int, n: int, m_gb: float, b_gb_s: float, t_u: float
) -> float:
    """Seed 002: ``(t_f + t_b)(ga - 1) + max(t_f + t_b, 2 (N - 1) M / (N b)) + t_u``."""
    if ga < 1 or n < 1 or b_gb_s <= 0:
        raise ValueError("ga and N must be >= 1 and bandwidth > 0")
    compute = t_f + t_b
    allreduce = 2.0 * (n - 1) * m_gb / (n * b_gb_s)
    return compute * (ga - 1) + max(compute, allreduce) + t_u


def dp_bytes_per_iteration(n: int, m_gb: float) -> float:
    """GB each worker sends in one ring all-reduce: ``2 (N - 1) M / N``."""
    return 2.0 * (n - 1) * m_gb / n


def stage_transfer_time(activation_gb: float, link: Link) -> float:
    """Activations forward and their gradients back over one stage boundary."""
    return 2.0 * activation_gb / link.gb_per_s + 2.0 * link.latency_s


def pp_1f1b_time(
    stage_compute_s: Sequence[float],
    transfer_s: Sequence[float],
    microbatches: int,
    t_u: float = 0.0,
) -> float:
    """1F1B pipeline time per iteration (AMP's formula, see the module docstring)."""
    if len(transfer_s) != len(stage_compute_s) - 1:
        raise ValueError("P stages need P - 1 transfers")
    if microbatches < 1:
        raise ValueError("microbatches must be >= 1")
    slowest = max([*stage_compute_s, *transfer_s])
    return (microbatches - 1) * slowest + sum(stage_compute_s) + sum(transfer_s) + t_u


def dp_pp_iteration_time(t_pp: float, d: int, p: int, m_gb: float, b_min_gb_s: float) -> float:
    """Seed 002: ``t_iter = t_pp + 2 (D - 1) M / (D P b_min)``."""
    if d < 1 or p < 1 or b_min_gb_s <= 0:
        raise ValueError("D and P must be >= 1 and bandwidth > 0")
    return t_pp + 2.0 * (d - 1) * m_gb / (d * p * b_min_gb_s)


def compute_cost(t_iter_s: float, vms: Sequence[tuple[int, float]]) -> float:
    """Seed 002: ``t_iter x sum_i num_vm_i cost_i`` with cost_i in USD per hour."""
    return t_iter_s * sum(n * price for n, price in vms) / 3600.0


def communication_cost(transfers: Sequence[tuple[float, float]]) -> float:
    """Seed 002: ``sum_ij data_ij c_ij`` over (GB exchanged, USD per GB) pairs."""
    return sum(gb * usd for gb, usd in transfers)


@dataclass(frozen=True)
class Estimate:
    t_iter_s: float
    compute_usd: float
    comm_usd: float

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.comm_usd

    @property
    def throughput(self) -> float:
        """Iterations per second."""
        return 1.0 / self.t_iter_s


@dataclass(frozen=True)
class ModelProfile:
    """Per-GPU profile of one model: forward/backward per micro-batch, update, gradient and
    activation sizes, and the number of pipeline stages it is cut into (if pipelined)."""

    t_f: float
    t_b: float
    t_u: float
    grad_gb: float
    activation_gb: float
    microbatches: int


def estimate_dp(
    prof: ModelProfile, n: int, link: Link, vm_price_per_hour: float, gpus_per_vm: int = 1
) -> Estimate:
    """Data parallelism over N GPUs whose slowest link is ``link``; every GPU ring-sends
    ``2 (N-1) M / N`` GB per iteration, priced at the link's rate."""
    t = dp_iteration_time(
        prof.t_f, prof.t_b, prof.microbatches, n, prof.grad_gb, link.gb_per_s, prof.t_u
    )
    vms = max(1, n // gpus_per_vm)
    comm = communication_cost([(n * dp_bytes_per_iteration(n, prof.grad_gb), link.usd_per_gb)])
    return Estimate(t, compute_cost(t, [(vms, vm_price_per_hour)]), comm)


def estimate_pp(
    prof: ModelProfile, stages: int, links: Sequence[Link], vm_price_per_hour: float
) -> Estimate:
    """A pipeline of ``stages`` GPUs (compute split evenly) over the given stage links."""
    per_stage = (prof.t_f + prof.t_b) / stages
    transfers = [stage_transfer_time(prof.activation_gb, ln) for ln in links]
    t = pp_1f1b_time([per_stage] * stages, transfers, prof.microbatches, prof.t_u)
    comm = communication_cost(
        [(2.0 * prof.activation_gb * prof.microbatches, ln.usd_per_gb) for ln in links]
    )
    return Estimate(t, compute_cost(t, [(stages, vm_price_per_hour)]), comm)


def estimate_dp_pp(
    prof: ModelProfile,
    d: int,
    p: int,
    pipe_links: Sequence[Link],
    dp_link: Link,
    vm_price_per_hour: float,
) -> Estimate:
    """D pipelines of P stages: pipelines over ``pipe_links``, all-reduce over ``dp_link``."""
    pp = estimate_pp(prof, p, pipe_links, vm_price_per_hour)
    t_pp = pp.t_iter_s
    grad_per_stage = prof.grad_gb / p
    t = dp_pp_iteration_time(t_pp, d, p, prof.grad_gb, dp_link.gb_per_s)
    comm_pp = d * pp.comm_usd
    comm_dp = communication_cost(
        [(d * p * dp_bytes_per_iteration(d, grad_per_stage), dp_link.usd_per_gb)]
    )
    return Estimate(t, compute_cost(t, [(d * p, vm_price_per_hour)]), comm_pp + comm_dp)


@dataclass(frozen=True)
class SpanAdvice:
    span: str  # same_az | cross_az | cross_region | cross_continent
    parallelism: str
    reason: str


def recommend_span(gpus_needed: int, supply: dict[str, int | None]) -> SpanAdvice:
    """Seed 002's findings as a rule. ``supply`` maps a span to the GPUs available within it
    (one zone, all zones of the region, all regions of the area); None means unknown.

    Zones of one region cost little; pipeline parallelism tolerates regions; data parallelism
    across continents loses throughput and money; with 2D parallelism the all-reduce stays
    inside one region (pipeline stages cross the boundary).
    """
    zone, region = supply.get("same_az"), supply.get("cross_az")
    if zone is not None and zone >= gpus_needed:
        return SpanAdvice("same_az", "data", "one zone has enough GPUs")
    if region is None or region >= gpus_needed:
        if zone is None:
            return SpanAdvice(
                "same_az",
                "data",
                "zone supply unknown: one zone; if it falls short, spreading over the region's "
                "zones costs little throughput (seed 002 finding 1)",
            )
        return SpanAdvice(
            "cross_az", "data", "zones of one region cost little throughput (seed 002 finding 1)"
        )
    area = supply.get("cross_region")
    if area is not None and area >= gpus_needed:
        return SpanAdvice(
            "cross_region",
            "data+pipeline (pipeline stages across regions)",
            "pipeline parallelism tolerates crossing regions; keep the all-reduce inside one "
            "region (seed 002 findings 2 and 4)",
        )
    return SpanAdvice(
        "cross_continent",
        "pipeline only across continents, or wait for capacity",
        "data parallelism across continents loses throughput and costs more (seed 002 finding 3)",
    )
