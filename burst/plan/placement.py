"""Placement: price every (provider, region, capacity) the preflight did not deny, rank them,
refuse a run whose best expected cost exceeds the budget. Produces the plan document.

``plan()`` composes four small steps, each its own module:

1. eligibility (``burst.plan.eligibility``): which (provider, region) pairs may be priced;
2. pricing (``burst.plan.pricing``, with ``burst.plan.reliability`` for the job MTBF and the
   checkpoint interval): each eligible pair on each capacity the spec allows;
3. ranking (``burst.plan.ranking``): best first, budget and deadline cut, refusal;
4. assembly (``burst.plan.assembly``): the plan document.

Every candidate left out is listed under ``excluded`` with the reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from burst.documents import DecisionRecord
from burst.errors import BadInputError
from burst.plan.assembly import plan_document
from burst.plan.catalog import Catalog
from burst.plan.eligibility import DataInputs, Exclusions, check_record_spec, eligible_sites
from burst.plan.pricing import PricingContext, no_price_reason, price_candidate, site_price
from burst.plan.ranking import OBJECTIVES, VERDICT_RANK, rank
from burst.plan.workload import Workload, estimate
from burst.spec import BurstJob

__all__ = [
    "CANDIDATE_CAPACITIES",
    "CAPACITIES",
    "VERDICT_RANK",
    "PlanOptions",
    "check_record_spec",
    "default_capacity",
    "plan",
]

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


def capacities_for(job: BurstJob, nodes: int, floor_nodes: int) -> list[str]:
    """The candidate capacities the spec's policy allows (a floor when asked and it fits)."""
    kinds = list(CAPACITIES[str(job.compute.capacity)])
    if 0 < floor_nodes < nodes and "on_demand" in kinds:
        kinds.append("spot_with_floor")
    return kinds


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
    if opts.objective not in OBJECTIVES:
        raise BadInputError(f"objective must be cost or time (got {opts.objective!r})")
    work = estimate(job, cat)
    data_in = DataInputs(
        shards=_shards(job, opts),
        sync_gb=job.model.parameters * cat.assumption("sync_bytes_per_param") / 1e9,
        sync_rounds=_sync_rounds(job, work, opts),
    )
    excluded = Exclusions()
    sites, data_options = eligible_sites(job, cat, record, data_in, excluded)
    ctx = PricingContext(job, cat, work, opts.seed, opts.replicas, opts.floor_nodes)
    priced: list[dict[str, Any]] = []
    for site in sites:
        for capacity in capacities_for(job, site.nodes, opts.floor_nodes):
            price = site_price(ctx, site, capacity)
            if price is None:
                excluded.add(
                    site.provider, site.region, capacity, no_price_reason(job.compute.gpu_type)
                )
                continue
            cand = price_candidate(ctx, site, capacity, price)
            if cand is None:
                excluded.add(
                    site.provider,
                    site.region,
                    capacity,
                    "pre-empted faster than it can checkpoint: the run never finishes",
                )
                continue
            priced.append(cand)
    candidates = rank(job, priced, opts.objective, excluded)
    return plan_document(
        job,
        cat,
        work,
        objective=opts.objective,
        candidates=candidates,
        excluded=excluded.items,
        data_in=data_in,
        data_options=data_options,
        seed=opts.seed,
        replicas=opts.replicas,
        record_given=record is not None,
    )
