"""Pricing: what one eligible site costs on one capacity, with its expected time.

The price of a billed unit (an instance of the site's shape, or one GPU where the site is
billed per GPU: ``burst.plan.billing``) comes from the catalog (spot, on demand, or an
on-demand floor under spot nodes); a price the catalog lacks is the conservative rule's
(``price_basis``). The paid time is the goodput simulation's at the candidate's job MTBF and
checkpoint interval (``burst.plan.reliability``); the cost adds egress, storage,
orchestration and labour (``burst.plan.cost.total_cost``). Every candidate carries its
``cost_terms``: each term of that total, named, summing to ``expected_cost_usd``.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from burst.budget import gpu_hours
from burst.errors import BadInputError
from burst.plan import datastrategy, goodput, reliability
from burst.plan.billing import PER_INSTANCE
from burst.plan.catalog import Catalog, Offer
from burst.plan.cost import HOURS_PER_MONTH, CostBreakdown, CostTerm, total_cost
from burst.plan.eligibility import Site
from burst.plan.interval import PEER_BYTES_S, tier_intervals
from burst.plan.workload import Workload
from burst.spec import BurstJob

log = logging.getLogger(__name__)

MAX_SIM_EVENTS = 200_000  # checkpoints simulated per candidate, across replicas


@dataclass(frozen=True)
class Price:
    per_unit_hour: float  # one billed unit: an instance, or one GPU where billed per GPU
    basis: str  # catalog | spot-unknown | unknown | reference
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
    """The hourly price of one unit of ``gpus_per_instance`` GPUs (the offer's instance, or
    one GPU where there is no offer) on ``spot`` or ``on_demand``; None when nothing is
    known."""
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
    mean = (floor * od.per_unit_hour + (nodes - floor) * spot.per_unit_hour) / nodes
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
    """The price of one billed unit of the site (``site.billing``) on ``capacity``."""
    gpu_type = ctx.job.compute.gpu_type
    unit = site.billing.unit_gpus
    offer = site.offer if site.billing.per == PER_INSTANCE else None
    if capacity == "spot_with_floor":
        return floor_price(ctx.cat, offer, gpu_type, unit, site.nodes, ctx.floor_nodes)
    return instance_price(ctx.cat, offer, gpu_type, unit, capacity)


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
    bill, data = site.billing, site.data
    nodes = bill.nodes
    node_mtbf = (
        None
        if reliability.preemption_kind(capacity) == "spot" and job.compute.mtbf_hours is not None
        else reliability.node_mtbf_hours(cat, site.offer, site.provider, capacity)
    )
    mtbf = reliability.job_mtbf(job, capacity, nodes, floor_nodes, node_mtbf)
    notice = reliability.notice_s(cat, site.offer, site.provider, capacity)
    interval = reliability.checkpoint_interval(job, work, mtbf)
    tiers = tier_intervals(  # with memory tiers (docs/checkpoints.md, "Tiers")
        work.checkpoint_cost_s,
        mtbf.seconds,
        mtbf.seconds * reliability.preemptible_nodes(nodes, floor_nodes),
        replicate_s=work.checkpoint_gb * 1e9 / PEER_BYTES_S,
        upload_s=work.upload_s,
        step_s=work.step_s,
        peer=nodes > 1,
    )
    sim = simulate_goodput(ctx, mtbf.seconds, notice, interval.interval_s)
    if not sim.finished or sim.goodput <= 0:
        return None
    paid_hours = (ctx.startup_s + sim.paid_s) / 3600.0
    price_per_hour = price.per_unit_hour * bill.units  # every billed GPU, used or idle
    storage_gb = work.checkpoint_gb * (
        job.training.checkpoint.keep_full + job.training.checkpoint.keep_weights
    )
    if data.egress_gb > 0 and data.strategy != datastrategy.REGIONAL_SHARDS:
        storage_gb += data.egress_gb  # the moved copy of the data (shards sync the model only)
    hours = data.transfer_hours + paid_hours
    storage_rate = storage_price(cat, site.provider)
    breakdown = total_cost(
        gpu_hours=paid_hours,
        gpu_price_per_hour=price_per_hour,
        egress_gb=data.egress_gb,
        egress_price_per_gb=data.egress_usd / data.egress_gb if data.egress_gb else 0.0,
        storage_gb_month=storage_gb * hours / HOURS_PER_MONTH,
        storage_price_per_gb_month=storage_rate,
        orchestration_usd=cat.assumption("orchestration_usd"),
        labour_usd=cat.assumption("labour_usd"),
    )
    cost = breakdown.total_usd
    decision = site.decision
    per_gpu = price.per_unit_hour / bill.unit_gpus
    terms = cost_terms(
        ctx,
        site,
        capacity,
        per_gpu,
        paid_hours=paid_hours,
        sim=sim,
        breakdown=breakdown,
        storage=(storage_gb, hours, storage_rate),
    )
    return {
        "region": site.region,
        "provider": site.provider,
        "capacity": capacity,
        "gpu_type": job.compute.gpu_type,
        "instance": site.offer.instance if site.offer else None,
        "nodes": nodes,
        "floor_nodes": floor_nodes,
        "gpus": bill.gpus,
        "gpus_used": bill.gpus_used,
        "billed_per": bill.per,
        "billing": bill.note,
        "price_per_hour": price_per_hour,
        "price_per_gpu_hour": per_gpu,
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
        "paid_gpu_hours": round(gpu_hours(bill.gpus, paid_hours), 6),
        "cost_terms": [t.as_dict() for t in terms],
        "data_strategy": data.strategy,
        "data_transfer_hours": round(data.transfer_hours, 6),
        "data_reason": data.reason,
        "mtbf_hours": mtbf.hours,
        "mtbf_source": mtbf.source,
        "notice_s": notice,
        "checkpoint_interval_s": interval.interval_s,
        "checkpoint_interval_basis": interval.basis,
        "young_daly_interval_s": interval.young_daly_s,
        "memory_interval_s": tiers.memory.interval_s,
        "store_interval_s": tiers.store.interval_s,
        "store_every": tiers.store_every,
        "goodput": sim.goodput,
        "expected_preemptions": sim.preemptions,
        "verdict": site.verdict,
        "reasons": [r.model_dump(exclude_unset=True) for r in decision.reasons] if decision else [],
        "within_budget": cost <= job.budget.max_usd,
        "within_deadline": hours <= job.budget.max_hours,
    }


def list_price_per_gpu(ctx: PricingContext, site: Site, capacity: str) -> float | None:
    """The on-demand price per GPU-hour at the site, against which a spot (or floor)
    candidate's discount is named; None on demand or when no on-demand price is known."""
    if reliability.preemption_kind(capacity) != "spot":
        return None
    od = site_price(ctx, site, "on_demand")
    return None if od is None else od.per_unit_hour / site.billing.unit_gpus


def cost_terms(
    ctx: PricingContext,
    site: Site,
    capacity: str,
    per_gpu: float,
    *,
    paid_hours: float,
    sim: goodput.Summary,
    breakdown: CostBreakdown,
    storage: tuple[float, float, float],
) -> list[CostTerm]:
    """Every term of the candidate's expected cost, named with its figures; they sum to
    ``breakdown.total_usd``. GPU time is split into the useful training, the start-up, the
    simulated pre-emption and checkpoint overhead (on the job's GPUs) and the node rounding
    (the idle GPUs of a partial node); a spot candidate's GPU terms are at the on-demand price
    with the spot discount its own term."""
    bill = site.billing
    used, idle = bill.gpus_used, bill.idle_gpus
    list_gpu = list_price_per_gpu(ctx, site, capacity)
    rate = per_gpu if list_gpu is None else list_gpu
    rate_txt = f"${rate:g}/GPU-h" + ("" if list_gpu is None else " on demand")
    useful_h = ctx.work.compute_s / 3600.0
    startup_h = ctx.startup_s / 3600.0
    over_h = paid_hours - useful_h - startup_h
    terms = [
        CostTerm(
            "training",
            used * useful_h * rate,
            f"{used} GPU(s) x {useful_h:.4g} h useful = {used * useful_h:,.4g} GPU-h x {rate_txt}",
        ),
        CostTerm(
            "start-up",
            used * startup_h * rate,
            f"{used} GPU(s) x {startup_h:.3g} h (catalog startup_s) x {rate_txt}",
        ),
        CostTerm(
            "pre-emptions and checkpoints",
            used * over_h * rate,
            f"{used} GPU(s) x {over_h:.4g} h of re-run work, checkpoint blocking and restarts "
            f"(simulated: {sim.preemptions:.3g} pre-emptions, goodput {sim.goodput:.3f}) x "
            f"{rate_txt}",
        ),
    ]
    if idle > 0:
        terms.append(
            CostTerm(
                "node rounding",
                idle * paid_hours * rate,
                f"{idle} idle GPU(s) of {bill.gpus} rented x {paid_hours:.4g} h paid x "
                f"{rate_txt} (every GPU of {site.offer.instance if site.offer else 'a node'} "
                "is billed)",
            )
        )
    if list_gpu is not None:
        what = "mean of the floor and spot nodes" if capacity == "spot_with_floor" else "spot"
        terms.append(
            CostTerm(
                "spot discount",
                bill.gpus * paid_hours * (per_gpu - list_gpu),
                f"{bill.gpus} GPU(s) x {paid_hours:.4g} h x (${per_gpu:g} {what} - "
                f"${list_gpu:g} on demand)/GPU-h",
            )
        )
    storage_gb, hours, storage_rate = storage
    data = site.data
    egress_rate = data.egress_usd / data.egress_gb if data.egress_gb else 0.0
    terms += [
        CostTerm(
            "egress",
            breakdown.egress_usd,
            f"{data.egress_gb:,.6g} GB x ${egress_rate:g}/GB ({data.strategy})",
        ),
        CostTerm(
            "storage",
            breakdown.storage_usd,
            f"{storage_gb:,.6g} GB for {hours:.4g} h = {storage_gb * hours / HOURS_PER_MONTH:,.4g} "
            f"GB-month x ${storage_rate:g}/GB-month",
        ),
        CostTerm("orchestration", breakdown.orchestration_usd, "catalog orchestration_usd"),
        CostTerm("labour", breakdown.labour_usd, "catalog labour_usd"),
    ]
    return terms
