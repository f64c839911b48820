"""What a regional-sync run is made of, from its spec: H (the local steps of a round), the
round schedule (its first round) and where they come from, and the links between its regions.
The ``regional-provision`` step writes them into its regions' role configs; the local runner
reports them."""

from __future__ import annotations

from itertools import combinations
from typing import Any

from burst.errors import BadInputError
from burst.plan.catalog import load_catalog
from burst.plan.datastrategy import link_class
from burst.regional.runtime import regional
from burst.spec import BurstJob


def run_links(job: BurstJob, regions: list[str]) -> list[dict[str, Any]]:
    """Every pair of the run's regions with the catalog's link (seed 002's classes: same area
    and provider is ``cross_region``, anything else ``cross_continent``)."""
    cat = load_catalog()
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    out = []
    for a, b in combinations(regions, 2):
        cls = link_class(cat, (provider, a), (provider, b))
        ln = cat.link(cls)
        out.append(
            {
                "a": a,
                "b": b,
                "class": cls,
                "gb_per_s": ln["gb_per_s"],
                "latency_ms": ln["latency_ms"],
                "usd_per_gb": ln["usd_per_gb"],
            }
        )
    return out


def local_steps_for(job: BurstJob) -> tuple[int, str]:
    """H of the run and where it comes from: ``regional_sync.local_steps``, or (null) the
    planner's pick (``burst.plan.regional.plan_regional_sync``: the smallest H whose sync over
    the catalog's link stays under ``sync_fraction`` of a round's compute, with the workload's
    step time, ``burst.plan.workload.estimate``: ``training.step_seconds`` when the spec gives
    it, else the FLOP estimate on the spec's GPUs), capped at ``training.steps``."""
    rs = regional(job)
    if rs.local_steps is not None:
        return rs.local_steps, "training.regional_sync.local_steps"
    doc, step_basis = _planned(job)
    picked = int(doc["local_steps"])
    basis = f"{doc['local_steps_basis']} (step time: {step_basis})"
    if picked > job.training.steps:
        basis += f"; the planner's H {picked} exceeds training.steps, capped to one round"
        picked = job.training.steps
    return picked, basis


def first_local_steps_for(job: BurstJob) -> tuple[int | None, str]:
    """The first round's H (adaptive rounds, doubling up to H; None: every round H) and where
    it comes from: ``regional_sync.first_local_steps``, or (null) the planner's pick
    (``burst.regional.estimates.choose_first_local_steps``: the shortest round whose sync stays
    under ``sync_fraction`` of its compute, when that is below H)."""
    rs = regional(job)
    if rs.first_local_steps is not None:
        return rs.first_local_steps, "training.regional_sync.first_local_steps"
    doc, _ = _planned(job)
    first = doc["first_local_steps"]
    return (int(first) if first is not None else None), str(doc["rounds_basis"])


def _planned(job: BurstJob) -> tuple[dict[str, Any], str]:
    """The planner's regional-sync document for ``job`` (the catalog's link, the workload's
    step time) and the basis of that step time."""
    from burst.plan.regional import plan_regional_sync
    from burst.plan.workload import estimate

    cat = load_catalog()
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    step = estimate(job, cat)
    doc = plan_regional_sync(job, cat, step, provider)
    if doc is None:  # not reached: regional() refused a spec without the strategy
        raise BadInputError(f"spec {job.name}: training.strategy is not regional-sync")
    return doc, step.basis
