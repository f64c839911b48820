"""Pricing: what one eligible site costs on one capacity, with its expected time.

The instance price comes from the catalog (spot, on demand, or an on-demand floor under spot
nodes); a price the catalog lacks is the conservative rule's (``price_basis``). The paid time
is the goodput simulation's at the candidate's job MTBF and checkpoint interval
(``burst.plan.reliability``); the cost adds egress, storage, orchestration and labour
(``burst.plan.cost.total_cost``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from burst.errors import BadInputError
from burst.plan import datastrategy, goodput, reliability
from burst.plan.catalog import Catalog, Offer
from burst.plan.cost import HOURS_PER_MONTH, total_cost
from burst.plan.eligibility import Site
from burst.plan.workload import Workload
from burst.spec import BurstJob

log = logging.getLogger(__name__)

MAX_SIM_EVENTS = 200_000  # checkpoints simulated per candidate, across replicas


@dataclass(frozen=True)
class Price:
    per_instance_hour: float
    basis: str  # catalog | spot-unknown | unknown
    source: str


@dataclass(frozen=True)
class PricingContext:
    """What every candidate of one plan is priced with."""

    job: BurstJob
    cat: Catalog
    work: Workload
    seed: int
    replicas: int
    floor_nodes: int  # on-demand nodes of a spot_with_floor candidate

    @property
    def startup_s(self) -> float:
        return self.cat.assumption("startup_s")

    @property
    def restart_s(self) -> float:
        return self.cat.assumption("restart_s")


def instance_price(
    cat: Catalog, offer: Offer | None, gpu_type: str, gpus_per_instance: int, capacity: str
) -> Price | None:
    """One instance's hourly price on ``spot`` or ``on_demand``; None when nothing is known."""
    od = offer.facts["on_demand_usd_per_hour"] if offer else None
    if capacity == "spot" and offer is not None:
        spot = offer.facts["spot_usd_per_hour"]
        if spot.value is not None:
            return Price(float(spot.value), "catalog", spot.source)
    if od is not None and od.value is not None:
        if capacity == "spot":
            return Price(
                float(od.value),
                "spot-unknown",
                "spot price unknown: the on-demand price is used (an upper bound)",
            )
        return Price(float(od.value), "catalog", od.source)
    best = cat.highest_known_on_demand(gpu_type)
    if best is None:
        return reference_price(cat, gpu_type, gpus_per_instance, capacity)
    per_gpu, src = best
    return Price(
        per_gpu * gpus_per_instance,
        "unknown",
        f"price unknown: highest known {gpu_type} on-demand price used "
        f"({src.provider}/{src.region} {src.instance})",
    )


#: How to give a price the catalog lacks (the refusal and docs/planning.md#the-catalog say it).
HOW_TO_PRICE = (
    "give one with --catalog FILE: an offer's spot_usd_per_hour / on_demand_usd_per_hour, or "
    "gpus.{gpu}.reference_spot_usd_per_gpu_hour and reference_on_demand_usd_per_gpu_hour "
    "(docs/planning.md#the-catalog)"
)


def no_price_reason(gpu_type: str) -> str:
    return f"no price known for {gpu_type} anywhere in the catalog: " + HOW_TO_PRICE.format(
        gpu=gpu_type
    )


def reference_price(
    cat: Catalog, gpu_type: str, gpus_per_instance: int, capacity: str
) -> Price | None:
    """A GPU no offer prices (Rubin): the catalog's reference price per GPU-hour, spot or on
    demand (spot falls back to on demand, an upper bound); None when it has none."""
    names = ["reference_on_demand_usd_per_gpu_hour"]
    if capacity == "spot":
        names.insert(0, "reference_spot_usd_per_gpu_hour")
    for name in names:
        fact = cat.gpu_fact(gpu_type, name)
        if fact is not None and fact.value is not None:
            what = "spot" if "spot" in name else "on-demand"
            note = (
                "" if what == "spot" or capacity != "spot" else " (no spot reference: upper bound)"
            )
            return Price(
                float(fact.value) * gpus_per_instance,
                "reference",
                f"no offer for {gpu_type} in the catalog: reference {what} price "
                f"${float(fact.value):g}/GPU-h ({fact.source}, {fact.date}){note}",
            )
    return None


def floor_price(
    cat: Catalog, offer: Offer | None, gpu_type: str, per_instance: int, nodes: int, floor: int
) -> Price | None:
    """``floor`` on-demand nodes and ``nodes - floor`` spot nodes, as a mean per instance."""
    od = instance_price(cat, offer, gpu_type, per_instance, "on_demand")
    spot = instance_price(cat, offer, gpu_type, per_instance, "spot")
    if od is None or spot is None:
        return None
    mean = (floor * od.per_instance_hour + (nodes - floor) * spot.per_instance_hour) / nodes
    basis = next(
        (b for b in ("unknown", "reference", "spot-unknown") if b in (od.basis, spot.basis)),
        "catalog",
    )
    return Price(
        mean,
        basis,
        f"{floor} on-demand node(s): {od.source}; {nodes - floor} spot node(s): {spot.source}",
    )


def site_price(ctx: PricingContext, site: Site, capacity: str) -> Price | None:
    gpu_type = ctx.job.compute.gpu_type
    if capacity == "spot_with_floor":
        return floor_price(
            ctx.cat, site.offer, gpu_type, site.gpus_per_instance, site.nodes, ctx.floor_nodes
        )
    return instance_price(ctx.cat, site.offer, gpu_type, site.gpus_per_instance, capacity)


def storage_price(cat: Catalog, provider: str) -> float:
    """USD per GB-month of the provider's object storage (else the highest known)."""
    f = cat.provider_fact(provider, "storage_usd_per_gb_month")
    if f is not None and f.value is not None:
        return float(f.value)
    known = [
        float(x["storage_usd_per_gb_month"].value)
        for x in cat.providers.values()
        if x.get("storage_usd_per_gb_month") and x["storage_usd_per_gb_month"].value is not None
    ]
    return max(known, default=0.0)


def simulate_goodput(
    ctx: PricingContext, mtbf_s: float, notice_s: float, interval_s: float
) -> goodput.Summary:
    """The simulated goodput; a workload the simulator cannot take (a run of more than
    goodput.MAX_SECONDS) is one line naming the spec fields it is derived from."""
    try:
        return _simulate(ctx, mtbf_s, notice_s, interval_s)
    except BadInputError as exc:
        raise BadInputError(
            "the spec's workload cannot be planned (it comes from training.steps, "
            "model.parameters, training.step_seconds or tokens_per_sample, compute.mtbf_hours "
            f"and the catalog): {exc.message}"
        ) from None


def _simulate(
    ctx: PricingContext, mtbf_s: float, notice_s: float, interval_s: float
) -> goodput.Summary:
    work = ctx.work
    params = goodput.SimParams(
        mtbf_s=mtbf_s,
        notice_s=notice_s,
        checkpoint_cost_s=work.checkpoint_cost_s,
        step_s=max(work.step_s, goodput.MIN_STEP_S),  # the simulation's finest step
        upload_s=work.upload_s,
        restart_s=ctx.restart_s,
        work_s=max(work.compute_s, 1e-9),
    )
    events = work.compute_s / max(interval_s, work.step_s) + 1
    replicas = max(1, min(ctx.replicas, int(MAX_SIM_EVENTS / events)))
    if events > MAX_SIM_EVENTS:  # too many checkpoints to simulate: use a coarser interval
        log.info("simulating at a coarser step: %.3g checkpoints", events)
        scale = events / MAX_SIM_EVENTS
        params = goodput.SimParams(
            mtbf_s=mtbf_s,
            notice_s=notice_s,
            checkpoint_cost_s=work.checkpoint_cost_s * scale,
            step_s=max(work.step_s, goodput.MIN_STEP_S) * scale,
            upload_s=work.upload_s,
            restart_s=ctx.restart_s,
            work_s=work.compute_s,
        )
        interval_s *= scale
    return goodput.simulate(params, interval_s, seed=ctx.seed, replicas=replicas)


def price_candidate(
    ctx: PricingContext, site: Site, capacity: str, price: Price
) -> dict[str, Any] | None:
    """The candidate (a plan document candidate, unranked); None when it is pre-empted
    faster than it can checkpoint and would never finish."""
    job, cat, work = ctx.job, ctx.cat, ctx.work
    floor_nodes = ctx.floor_nodes if capacity == "spot_with_floor" else 0
    nodes, per_instance, data = site.nodes, site.gpus_per_instance, site.data
    node_mtbf = (
        None
        if reliability.preemption_kind(capacity) == "spot" and job.compute.mtbf_hours is not None
        else reliability.node_mtbf_hours(cat, site.offer, site.provider, capacity)
    )
    mtbf = reliability.job_mtbf(job, capacity, nodes, floor_nodes, node_mtbf)
    notice = reliability.notice_s(cat, site.offer, site.provider, capacity)
    interval = reliability.checkpoint_interval(job, work, mtbf)
    sim = simulate_goodput(ctx, mtbf.seconds, notice, interval.interval_s)
    if not sim.finished or sim.goodput <= 0:
        return None
    paid_hours = (ctx.startup_s + sim.paid_s) / 3600.0
    price_per_hour = price.per_instance_hour * nodes
    storage_gb = work.checkpoint_gb * (
        job.training.checkpoint.keep_full + job.training.checkpoint.keep_weights
    )
    if data.egress_gb > 0 and data.strategy != datastrategy.REGIONAL_SHARDS:
        storage_gb += data.egress_gb  # the moved copy of the data (shards sync the model only)
    hours = data.transfer_hours + paid_hours
    breakdown = total_cost(
        gpu_hours=paid_hours,
        gpu_price_per_hour=price_per_hour,
        egress_gb=data.egress_gb,
        egress_price_per_gb=data.egress_usd / data.egress_gb if data.egress_gb else 0.0,
        storage_gb_month=storage_gb * hours / HOURS_PER_MONTH,
        storage_price_per_gb_month=storage_price(cat, site.provider),
        orchestration_usd=cat.assumption("orchestration_usd"),
        labour_usd=cat.assumption("labour_usd"),
    )
    cost = breakdown.total_usd
    decision = site.decision
    return {
        "region": site.region,
        "provider": site.provider,
        "capacity": capacity,
        "gpu_type": job.compute.gpu_type,
        "instance": site.offer.instance if site.offer else None,
        "nodes": nodes,
        "floor_nodes": floor_nodes,
        "gpus": nodes * per_instance,
        "price_per_hour": price_per_hour,
        "price_per_gpu_hour": price.per_instance_hour / per_instance,
        "price_basis": price.basis,
        "price_source": price.source,
        "availability": site.availability,
        "expected_cost_usd": round(cost, 4),
        "expected_hours": round(hours, 6),
        "compute_usd": round(breakdown.gpu_usd, 4),
        "egress_usd": round(breakdown.egress_usd, 4),
        "storage_usd": round(breakdown.storage_usd, 6),
        "storage_gb": round(storage_gb, 6),
        "orchestration_usd": breakdown.orchestration_usd,
        "labour_usd": breakdown.labour_usd,
        "paid_gpu_hours": round(paid_hours * nodes * per_instance, 6),
        "data_strategy": data.strategy,
        "data_transfer_hours": round(data.transfer_hours, 6),
        "data_reason": data.reason,
        "mtbf_hours": mtbf.hours,
        "mtbf_source": mtbf.source,
        "notice_s": notice,
        "checkpoint_interval_s": interval.interval_s,
        "checkpoint_interval_basis": interval.basis,
        "young_daly_interval_s": interval.young_daly_s,
        "goodput": sim.goodput,
        "expected_preemptions": sim.preemptions,
        "verdict": site.verdict,
        "reasons": [r.model_dump(exclude_unset=True) for r in decision.reasons] if decision else [],
        "within_budget": cost <= job.budget.max_usd,
        "within_deadline": hours <= job.budget.max_hours,
    }
