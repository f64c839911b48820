"""Placement: price every (provider, region, capacity) the preflight did not deny, rank them,
refuse a run whose best expected cost exceeds the budget. Produces the plan document.

Ranking (``objective="cost"``, the default), lexicographic:
1. preflight verdict: ``allow`` before ``review`` / ``unchecked`` (no decision record given);
2. candidates whose price is in the catalog before those priced by the conservative rule;
3. known availability before unknown;
4. expected cost, then expected hours (``objective="time"`` swaps these two).

Candidates over the budget or past the deadline are dropped (provision must never fail over
into them) and listed under ``excluded`` with the reason; so are denied, unpriceable and
data-infeasible candidates. If nothing is left, ``PolicyRefusal`` (exit 3) with the numbers.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from burst.documents import Decision, DecisionRecord, parse_document
from burst.errors import BadInputError, PolicyRefusal
from burst.plan import datastrategy, goodput
from burst.plan.catalog import Catalog, Offer
from burst.plan.cost import HOURS_PER_MONTH, total_cost
from burst.plan.crossregion import recommend_span
from burst.plan.interval import choose_interval, job_mtbf_s
from burst.plan.regional import plan_regional_sync
from burst.plan.workload import Workload, estimate
from burst.providers import no_stack_reason, stack_for
from burst.spec import BurstJob

log = logging.getLogger(__name__)

# One capacity vocabulary (spec, plan, stacks, docs). The spec's ``compute.capacity`` is a
# policy: which kinds of candidate the planner may rank. A candidate's ``capacity`` is what a
# stack applies: ``spot``, ``on_demand``, or ``spot_with_floor`` (spot nodes plus
# ``floor_nodes`` on-demand nodes that are never pre-empted). Every stack's ``capacity``
# variable accepts exactly CANDIDATE_CAPACITIES (tests/terraform/test_capacity_vocabulary.py).
CAPACITIES = {
    "spot": ("spot",),
    "on_demand": ("on_demand",),
    "spot_with_fallback": ("spot", "on_demand"),  # spot first, on-demand candidates to fail over to
}
CANDIDATE_CAPACITIES = ("spot", "on_demand", "spot_with_floor")


def default_capacity(spec_capacity: str) -> str:
    """The candidate capacity a candidate without one gets: the policy's first kind."""
    return CAPACITIES.get(str(spec_capacity), ("spot",))[0]


VERDICT_RANK = {"allow": 0, "review": 1, "unchecked": 1}
MAX_SIM_EVENTS = 200_000  # checkpoints simulated per candidate, across replicas


@dataclass(frozen=True)
class PlanOptions:
    objective: str = "cost"  # cost | time
    seed: int = 0
    replicas: int = 32
    floor_nodes: int = 0  # > 0: also rank "spot_with_floor" (that many on-demand nodes)
    # the dataset split over regions (region -> GB); None: all of it in spec data.region
    shards: dict[str, float] | None = None
    # model syncs of regional-shard training; None: one per checkpoint interval
    sync_rounds: int | None = None


def _shards(job: BurstJob, opts: PlanOptions) -> dict[str, float] | None:
    if opts.shards is None:
        if job.data.shards:  # the spec's own split (a --shard on the command line wins)
            return dict(job.data.shards)
        return {job.data.region: job.data.size_gb} if job.data.region else None
    if not opts.shards:
        raise BadInputError("shards: give at least one region=GB")
    for region, gb in opts.shards.items():
        if not isinstance(region, str) or not region:
            raise BadInputError(f"shards: region {region!r} must be a region name")
        if not isinstance(gb, int | float) or isinstance(gb, bool) or not gb >= 0:
            raise BadInputError(f"shards: {region}: size must be a number of GB >= 0 (got {gb!r})")
    return {r: float(gb) for r, gb in opts.shards.items()}


def _sync_rounds(job: BurstJob, work: Workload, opts: PlanOptions) -> int:
    if opts.sync_rounds is not None:
        if opts.sync_rounds < 1:
            raise BadInputError(f"sync_rounds must be >= 1 (got {opts.sync_rounds})")
        return opts.sync_rounds
    steps = job.training.checkpoint.interval_steps
    if isinstance(steps, int) and steps > 0:
        return max(1, math.ceil(job.training.steps / steps))
    return max(1, math.ceil(work.compute_s / 3600.0))


# --------------------------------------------------------------------------- decisions


def _decisions(record: DecisionRecord | None) -> dict[tuple[str, str], Decision] | None:
    """Index the preflight decision record by (provider, region); None when none was given."""
    if record is None:
        return None
    return {(d.provider, d.region): d for d in record.decisions}


def check_record_spec(
    record: DecisionRecord | dict[str, Any] | None, job: BurstJob, where: str = "input decision"
) -> DecisionRecord | None:
    """The decision record, parsed (``burst.documents.DecisionRecord``: a record of the wrong
    shape, e.g. without ``spec_sha256``, is ``BadInputError``, exit 2). A record made for
    another spec is refused: its verdicts say nothing about this one (``PolicyRefusal``,
    exit 3, as provision's ``require_allow`` does)."""
    if record is None:
        return None
    parsed = parse_document(DecisionRecord, record, where)
    sha = parsed.spec_sha256
    if sha != job.sha256():
        raise PolicyRefusal(
            f"decision record is for another spec (spec_sha256 {sha[:12]}, this spec "
            f"{job.sha256()[:12]}): run `burst preflight` on this spec again",
            where=where,
        )
    return parsed


# --------------------------------------------------------------------------- pricing


@dataclass(frozen=True)
class Price:
    per_instance_hour: float
    basis: str  # catalog | spot-unknown | unknown
    source: str


def _instance_price(
    cat: Catalog, offer: Offer | None, gpu_type: str, gpus_per_instance: int, capacity: str
) -> Price | None:
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
        return None
    per_gpu, src = best
    return Price(
        per_gpu * gpus_per_instance,
        "unknown",
        f"price unknown: highest known {gpu_type} on-demand price used "
        f"({src.provider}/{src.region} {src.instance})",
    )


def _known(offer: Offer | None, name: str) -> int | None:
    fact = offer.fact(name) if offer else None
    return int(fact.value) if fact is not None and fact.value is not None else None


def _supply(cat: Catalog, job: BurstJob, provider: str, region: str) -> dict[str, int | None]:
    """GPUs one zone, the region, the regions of its area and all the spec's regions can
    supply (catalog ``max_gpus_per_zone`` / ``max_gpus``; None when any is unknown)."""
    gpu = job.compute.gpu_type
    offer = cat.offer(provider, region, gpu)

    def total(regions: list[str]) -> int | None:
        counts = [_known(cat.offer(provider, r, gpu), "max_gpus") for r in regions]
        return None if any(n is None for n in counts) else sum(n or 0 for n in counts)

    area = cat.area(provider, region)
    same_area = [r for r in job.compute.regions if cat.area(provider, r) == area]
    everywhere = [r for r in job.compute.regions if (provider, r) in cat.regions]
    return {
        "same_az": _known(offer, "max_gpus_per_zone"),
        "cross_az": _known(offer, "max_gpus"),
        "cross_region": total(same_area),
        "cross_continent": total(everywhere),
    }


def _floor_price(
    cat: Catalog, offer: Offer | None, gpu_type: str, per_instance: int, nodes: int, floor: int
) -> Price | None:
    """``floor`` on-demand nodes and ``nodes - floor`` spot nodes, as a mean per instance."""
    od = _instance_price(cat, offer, gpu_type, per_instance, "on_demand")
    spot = _instance_price(cat, offer, gpu_type, per_instance, "spot")
    if od is None or spot is None:
        return None
    mean = (floor * od.per_instance_hour + (nodes - floor) * spot.per_instance_hour) / nodes
    basis = next((b for b in ("unknown", "spot-unknown") if b in (od.basis, spot.basis)), "catalog")
    return Price(
        mean,
        basis,
        f"{floor} on-demand node(s): {od.source}; {nodes - floor} spot node(s): {spot.source}",
    )


def _node_mtbf_hours(
    cat: Catalog, job: BurstJob, offer: Offer | None, provider: str, capacity: str
) -> tuple[float, str]:
    if capacity == "on_demand":
        f = cat.assumptions["on_demand_node_mtbf_hours"]
        return float(f.value), f"catalog assumptions.on_demand_node_mtbf_hours ({f.source})"
    fact = offer.fact("spot_node_mtbf_hours") if offer else None
    if fact is None or fact.value is None:
        fact = cat.provider_fact(provider, "spot_node_mtbf_hours")
    if fact is not None and fact.value is not None:
        return float(fact.value), f"catalog ({fact.source})"
    known = [
        float(f["spot_node_mtbf_hours"].value)
        for f in cat.providers.values()
        if f.get("spot_node_mtbf_hours") and f["spot_node_mtbf_hours"].value is not None
    ]
    if not known:
        raise BadInputError(
            f"no spot MTBF known for {provider}: add spot_node_mtbf_hours to a --catalog file",
            where="catalog",
        )
    return min(known), "unknown: the shortest known spot MTBF is used (conservative)"


def _notice_s(cat: Catalog, offer: Offer | None, provider: str, capacity: str) -> float:
    if capacity == "on_demand":
        return 0.0  # hardware failures come without notice
    fact = offer.fact("notice_s") if offer else None
    if fact is None or fact.value is None:
        fact = cat.provider_fact(provider, "notice_s")
    return float(fact.value) if fact is not None and fact.value is not None else 0.0


def _storage_price(cat: Catalog, provider: str) -> float:
    f = cat.provider_fact(provider, "storage_usd_per_gb_month")
    if f is not None and f.value is not None:
        return float(f.value)
    known = [
        float(x["storage_usd_per_gb_month"].value)
        for x in cat.providers.values()
        if x.get("storage_usd_per_gb_month") and x["storage_usd_per_gb_month"].value is not None
    ]
    return max(known, default=0.0)


# --------------------------------------------------------------------------- training time


def _goodput(
    work: Workload,
    mtbf_s: float,
    notice_s: float,
    restart_s: float,
    interval_s: float,
    opts: PlanOptions,
) -> goodput.Summary:
    """The simulated goodput; a workload the simulator cannot take (a run of more than
    goodput.MAX_SECONDS) is one line naming the spec fields it is derived from."""
    try:
        return _simulate_goodput(work, mtbf_s, notice_s, restart_s, interval_s, opts)
    except BadInputError as exc:
        raise BadInputError(
            "the spec's workload cannot be planned (it comes from training.steps, "
            "model.parameters, training.step_seconds or tokens_per_sample, compute.mtbf_hours "
            f"and the catalog): {exc.message}"
        ) from None


def _simulate_goodput(
    work: Workload,
    mtbf_s: float,
    notice_s: float,
    restart_s: float,
    interval_s: float,
    opts: PlanOptions,
) -> goodput.Summary:
    params = goodput.SimParams(
        mtbf_s=mtbf_s,
        notice_s=notice_s,
        checkpoint_cost_s=work.checkpoint_cost_s,
        step_s=max(work.step_s, goodput.MIN_STEP_S),  # the simulation's finest step
        upload_s=work.upload_s,
        restart_s=restart_s,
        work_s=max(work.compute_s, 1e-9),
    )
    events = work.compute_s / max(interval_s, work.step_s) + 1
    replicas = max(1, min(opts.replicas, int(MAX_SIM_EVENTS / events)))
    if events > MAX_SIM_EVENTS:  # too many checkpoints to simulate: use a coarser interval
        log.info("simulating at a coarser step: %.3g checkpoints", events)
        scale = events / MAX_SIM_EVENTS
        params = goodput.SimParams(
            mtbf_s=mtbf_s,
            notice_s=notice_s,
            checkpoint_cost_s=work.checkpoint_cost_s * scale,
            step_s=max(work.step_s, goodput.MIN_STEP_S) * scale,
            upload_s=work.upload_s,
            restart_s=restart_s,
            work_s=work.compute_s,
        )
        interval_s *= scale
    return goodput.simulate(params, interval_s, seed=opts.seed, replicas=replicas)


# --------------------------------------------------------------------------- the plan


def plan(
    job: BurstJob,
    cat: Catalog,
    decision_record: DecisionRecord | dict[str, Any] | None = None,
    opts: PlanOptions | None = None,
    *,
    decision_source: str = "input decision",
) -> dict[str, Any]:
    """The plan document (see docs/planning.md "The plan document"). A decision record must
    be the preflight's for this exact spec (``check_record_spec``); ``decision_source`` names
    where it came from in error messages."""
    opts = opts or PlanOptions()
    record = check_record_spec(decision_record, job, decision_source)
    if opts.objective not in ("cost", "time"):
        raise BadInputError(f"objective must be cost or time (got {opts.objective!r})")
    work = estimate(job, cat)
    decisions = _decisions(record)
    gpu_type = job.compute.gpu_type
    startup_s = cat.assumption("startup_s")
    restart_s = cat.assumption("restart_s")
    priced: list[dict[str, Any]] = []
    excluded: list[dict[str, Any]] = []
    shards = _shards(job, opts)
    sync_rounds = _sync_rounds(job, work, opts)
    sync_gb = job.model.parameters * cat.assumption("sync_bytes_per_param") / 1e9
    data_options: dict[tuple[str, str], list[datastrategy.DataPlan]] = {}

    def runnable(provider: str) -> set[str]:
        """Regions where this provider could train a shard: in the spec and the catalog, not
        denied (nor undecided) by the preflight, the GPU not known to be unavailable."""
        out = set()
        for r in job.compute.regions:
            if (provider, r) not in cat.regions:
                continue
            if decisions is not None:
                d = decisions.get((provider, r))
                if d is None or d.verdict == "deny":
                    continue
            off = cat.offer(provider, r, gpu_type)
            if off is not None and str(off.facts["availability"].value) == "unavailable":
                continue
            out.add(r)
        return out

    def exclude(
        provider: str, region: str, capacity: str | None, reason: str, **extra: Any
    ) -> None:
        excluded.append(
            {
                "provider": provider,
                "region": region,
                "capacity": capacity,
                "reason": reason,
                **extra,
            }
        )

    for provider in job.compute.providers:
        for region in job.compute.regions:
            if (provider, region) not in cat.regions:
                exclude(
                    provider,
                    region,
                    None,
                    f"{region} is not in the catalog for provider {provider}",
                )
                continue
            if stack_for(provider) is None:
                exclude(provider, region, None, no_stack_reason(provider))
                continue
            decision = None
            verdict = "unchecked"
            if decisions is not None:
                decision = decisions.get((provider, region))
                if decision is None:
                    exclude(
                        provider,
                        region,
                        None,
                        "no preflight decision for this candidate (fail closed)",
                    )
                    continue
                verdict = decision.verdict
                if verdict == "deny":
                    exclude(
                        provider,
                        region,
                        None,
                        "denied by the preflight",
                        verdict="deny",
                        reasons=[r.model_dump(exclude_unset=True) for r in decision.reasons],
                    )
                    continue
            offer = cat.offer(provider, region, gpu_type)
            availability = str(offer.facts["availability"].value) if offer else "unknown"
            if availability == "unavailable":
                exclude(
                    provider,
                    region,
                    None,
                    f"{gpu_type} is unavailable there (catalog: "
                    f"{offer.facts['availability'].source if offer else ''})",
                )
                continue
            may_move = True if record is None else record.may_move(decision)
            if shards is None:  # data outside any cloud region
                data = datastrategy.for_candidate(
                    cat, job.data.size_gb, None, (provider, region), may_move
                )
                data_options[(provider, region)] = [data]
            else:
                data, data_options[(provider, region)] = datastrategy.choose(
                    cat,
                    shards,
                    (provider, region),
                    may_move,
                    sync_gb=sync_gb,
                    sync_rounds=sync_rounds,
                    runnable=runnable(provider),
                )
            if not data.feasible:
                exclude(provider, region, None, data.reason)
                continue
            region_gpus = _known(offer, "max_gpus")
            if region_gpus is not None and region_gpus < job.compute.gpu_count:
                exclude(
                    provider,
                    region,
                    None,
                    f"the region supplies at most {region_gpus} {gpu_type} (catalog max_gpus), "
                    f"the job needs {job.compute.gpu_count}: "
                    + recommend_span(
                        job.compute.gpu_count, _supply(cat, job, provider, region)
                    ).reason,
                )
                continue
            per_instance = offer.gpus_per_instance if offer else job.compute.gpus_per_node
            nodes = max(1, math.ceil(job.compute.gpu_count / per_instance))
            capacities = list(CAPACITIES[str(job.compute.capacity)])
            if 0 < opts.floor_nodes < nodes and "on_demand" in capacities:
                capacities.append("spot_with_floor")
            for capacity in capacities:
                if capacity == "spot_with_floor":
                    price = _floor_price(
                        cat, offer, gpu_type, per_instance, nodes, opts.floor_nodes
                    )
                else:
                    price = _instance_price(cat, offer, gpu_type, per_instance, capacity)
                if price is None:
                    exclude(
                        provider,
                        region,
                        capacity,
                        f"no price known for {gpu_type} "
                        "anywhere in the catalog: add one with --catalog",
                    )
                    continue
                cand = _price_candidate(
                    job,
                    cat,
                    work,
                    opts,
                    provider,
                    region,
                    capacity,
                    offer,
                    nodes,
                    per_instance,
                    price,
                    availability,
                    data,
                    verdict,
                    decision,
                    startup_s,
                    restart_s,
                    opts.floor_nodes if capacity == "spot_with_floor" else 0,
                )
                if cand is None:
                    exclude(
                        provider,
                        region,
                        capacity,
                        "pre-empted faster than it can checkpoint: the run never finishes",
                    )
                    continue
                priced.append(cand)

    def key(c: dict[str, Any]) -> tuple[Any, ...]:
        main = (
            (c["expected_cost_usd"], c["expected_hours"])
            if opts.objective == "cost"
            else (c["expected_hours"], c["expected_cost_usd"])
        )
        return (
            VERDICT_RANK[c["verdict"]],
            c["price_basis"] == "unknown",
            c["availability"] != "available",
            *main,
        )

    priced.sort(key=key)
    candidates = []
    for c in priced:
        if not c["within_budget"]:
            exclude(
                c["provider"],
                c["region"],
                c["capacity"],
                f"expected cost ${c['expected_cost_usd']:,.2f} exceeds the budget "
                f"${job.budget.max_usd:,.2f}",
                expected_cost_usd=c["expected_cost_usd"],
            )
        elif not c["within_deadline"]:
            exclude(
                c["provider"],
                c["region"],
                c["capacity"],
                f"expected {c['expected_hours']:.2f} h exceeds the deadline "
                f"{job.budget.max_hours:g} h",
                expected_hours=c["expected_hours"],
            )
        else:
            candidates.append(c)
    if not candidates:
        raise PolicyRefusal(_refusal(job, priced, excluded))
    for i, c in enumerate(candidates, 1):
        c["rank"] = i
    first = candidates[0]
    span = recommend_span(
        job.compute.gpu_count, _supply(cat, job, first["provider"], first["region"])
    )
    regional = plan_regional_sync(job, cat, work, first["provider"])
    return {
        **({"regional": regional} if regional is not None else {}),
        "spec_sha256": job.sha256(),
        "objective": opts.objective,
        "budget_usd": job.budget.max_usd,
        "deadline_hours": job.budget.max_hours,
        "gpu_type": gpu_type,
        "gpu_count": job.compute.gpu_count,
        "workload": work.as_dict(),
        "data": {
            "uri": job.data.uri,
            "region": job.data.region,
            "size_gb": job.data.size_gb,
            "strategy": first["data_strategy"],
            "shards": shards,
            "sync_gb": sync_gb,
            "sync_rounds": sync_rounds,
            # the three strategies for the first candidate: what the choice was among
            "alternatives": [
                o.as_dict() for o in data_options[(first["provider"], first["region"])]
            ],
        },
        "candidates": candidates,
        "excluded": excluded,
        "topology": {"span": span.span, "parallelism": span.parallelism, "reason": span.reason},
        "catalog": {
            "files": cat.files,
            "assumptions": {k: f.as_dict() for k, f in sorted(cat.assumptions.items())},
        },
        "simulation": {"seed": opts.seed, "replicas": opts.replicas},
        "decision_record": "given" if record is not None else "none (unchecked)",
    }


def _price_candidate(
    job: BurstJob,
    cat: Catalog,
    work: Workload,
    opts: PlanOptions,
    provider: str,
    region: str,
    capacity: str,
    offer: Offer | None,
    nodes: int,
    per_instance: int,
    price: Price,
    availability: str,
    data: datastrategy.DataPlan,
    verdict: str,
    decision: Decision | None,
    startup_s: float,
    restart_s: float,
    floor_nodes: int = 0,
) -> dict[str, Any] | None:
    # with an on-demand floor only the spot nodes are pre-empted (any of them stops the job)
    kind = "spot" if capacity == "spot_with_floor" else capacity
    preemptible = nodes - floor_nodes
    if kind == "spot" and job.compute.mtbf_hours is not None:
        mtbf_s = job.compute.mtbf_hours * 3600.0 * nodes / preemptible
        mtbf_source = "spec compute.mtbf_hours (job)"
    else:
        node_h, mtbf_source = _node_mtbf_hours(cat, job, offer, provider, kind)
        mtbf_s = job_mtbf_s(node_h, preemptible)
    notice = _notice_s(cat, offer, provider, kind)
    choice = choose_interval(work.checkpoint_cost_s, mtbf_s, work.upload_s, work.step_s)
    steps = job.training.checkpoint.interval_steps
    if isinstance(steps, int):
        interval_s = steps * work.step_s
        basis = f"spec training.checkpoint.interval_steps {steps} x {work.step_s:.3g} s a step"
        if interval_s < work.upload_s:
            basis += (
                f"; shorter than the {work.upload_s:.3g} s upload, so checkpoints wait for "
                "uploads (interval_steps: auto avoids it)"
            )
    else:
        interval_s, basis = choice.interval_s, choice.reason
    sim = _goodput(work, mtbf_s, notice, restart_s, interval_s, opts)
    if not sim.finished or sim.goodput <= 0:
        return None
    paid_s = startup_s + sim.paid_s
    paid_hours = paid_s / 3600.0
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
        storage_price_per_gb_month=_storage_price(cat, provider),
        orchestration_usd=cat.assumption("orchestration_usd"),
        labour_usd=cat.assumption("labour_usd"),
    )
    cost = breakdown.total_usd
    return {
        "region": region,
        "provider": provider,
        "capacity": capacity,
        "gpu_type": job.compute.gpu_type,
        "instance": offer.instance if offer else None,
        "nodes": nodes,
        "floor_nodes": floor_nodes,
        "gpus": nodes * per_instance,
        "price_per_hour": price_per_hour,
        "price_per_gpu_hour": price.per_instance_hour / per_instance,
        "price_basis": price.basis,
        "price_source": price.source,
        "availability": availability,
        "expected_cost_usd": round(cost, 4),
        "expected_hours": round(hours, 6),
        "compute_usd": round(breakdown.gpu_usd, 4),
        "egress_usd": round(breakdown.egress_usd, 4),
        "storage_usd": round(breakdown.storage_usd, 6),
        "orchestration_usd": breakdown.orchestration_usd,
        "labour_usd": breakdown.labour_usd,
        "paid_gpu_hours": round(paid_hours * nodes * per_instance, 6),
        "data_strategy": data.strategy,
        "data_transfer_hours": round(data.transfer_hours, 6),
        "data_reason": data.reason,
        "mtbf_hours": mtbf_s / 3600.0,
        "mtbf_source": mtbf_source,
        "notice_s": notice,
        "checkpoint_interval_s": interval_s,
        "checkpoint_interval_basis": basis,
        "young_daly_interval_s": choice.interval_s,
        "goodput": sim.goodput,
        "expected_preemptions": sim.preemptions,
        "verdict": verdict,
        "reasons": [r.model_dump(exclude_unset=True) for r in decision.reasons] if decision else [],
        "within_budget": cost <= job.budget.max_usd,
        "within_deadline": hours <= job.budget.max_hours,
    }


def _refusal(job: BurstJob, priced: list[dict[str, Any]], excluded: list[dict[str, Any]]) -> str:
    if priced:
        best = min(priced, key=lambda c: c["expected_cost_usd"])
        where = f"{best['provider']}/{best['region']} {best['capacity']}"
        if not best["within_budget"]:
            return (
                f"refused before renting anything: best expected cost "
                f"${best['expected_cost_usd']:,.2f} ({where}, {best['expected_hours']:.2f} h"
                f" at ${best['price_per_hour']:,.2f}/h) exceeds the budget "
                f"${job.budget.max_usd:,.2f} (budget.max_usd)"
            )
        fastest = min(priced, key=lambda c: c["expected_hours"])
        return (
            f"refused before renting anything: best expected time "
            f"{fastest['expected_hours']:.2f} h ({fastest['provider']}/{fastest['region']} "
            f"{fastest['capacity']}) exceeds the deadline {job.budget.max_hours:g} h "
            "(budget.max_hours)"
        )
    reasons = "; ".join(f"{e['provider']}/{e['region']}: {e['reason']}" for e in excluded)
    return f"no candidate can run this job: {reasons or 'no regions or providers given'}"
