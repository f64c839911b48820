"""The plan of a regional-sync spec (issue 21): bytes, egress and sync time of its rounds, the
number of local steps H, and the comparison with synchronous data parallelism.

``training.strategy: regional-sync`` trains one worker per region of
``training.regional_sync.regions`` on that region's shard and sends a compressed
pseudo-gradient to ``aggregation_region`` every H local steps. This module turns the spec and
the catalog into the inputs of ``burst.regional.estimates.plan_regional`` and back into the
plan document's ``regional`` section:

* links: each remote region's link to the aggregation region is the catalog's seed 002 link
  class between them (``datastrategy.link_class``: same area and provider ``cross_region``,
  else ``cross_continent``), priced at the provider's inter-region egress price
  (``datastrategy.inter_region_price``, as the data strategies are);
* the model: one tensor of ``model.parameters`` values (the per-tensor padding of int8 blocks
  is negligible at plan time); gradients of ``sync_bytes_per_param`` bytes a parameter for the
  synchronous DP comparison (the catalog's assumption, bf16);
* compute: the workload's step time (``burst.plan.workload.estimate``) is one local step in
  every region (each region runs the spec's GPUs), split 1:2 between forward and backward;
* H: ``local_steps`` from the spec, else the smallest H whose sync stays under
  ``sync_fraction`` of a round's compute (``estimates.choose_local_steps``);
* the round schedule: ``first_local_steps`` from the spec, else the planner's
  (``estimates.choose_first_local_steps``): the first round the shortest whose sync stays under
  ``sync_fraction`` of its compute, doubling up to H; constant when that is H already (always
  so when the planner picks H too); the plan counts every round's bytes;
* quality: the outer optimizer the run will use (the spec's, or the measured table's for the
  number of regions and H: ``burst.regional.defaults``) and the held-out loss ratio against
  synchronous DP at equal tokens that the table measured for it (``expected_loss_ratio``;
  null when the spec names a setting the table did not measure).

And what a run of such a spec is made of (``local_steps_for``, ``first_local_steps_for``,
``run_links``): H, the round schedule and where they come from, and the links between its
regions. A region's branch of ``burst-regional`` runs burst-train's steps: ``provision``
places in the branch's region only (``branch_region``, ``region_candidates``) and admits the
region's share of the budget (``region_share``); ``train`` (the worker) and ``aggregate``
derive their process's view of the run (``role_config``) from the spec, the plan and the
stack's outputs, as every step derives what it needs from its inputs.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from itertools import combinations
from pathlib import Path
from typing import Any

from burst.documents.plan import Candidate, PlanDocument
from burst.errors import BadInputError
from burst.plan.catalog import Catalog, load_catalog
from burst.plan.crossregion import Link, ModelProfile
from burst.plan.datastrategy import inter_region_price, link_class
from burst.plan.workload import Workload
from burst.regional.rounds import Rounds
from burst.regional.runtime import RoleConfig, regional, rounds_for
from burst.regional.site import given_site
from burst.settings import current
from burst.spec import BurstJob, RegionalSync
from burst.storage.base import ObjectStore

log = logging.getLogger(__name__)

REGIONAL_SYNC = "regional-sync"


def regional_settings(job: BurstJob) -> RegionalSync | None:
    """The spec's ``training.regional_sync`` when the strategy is regional-sync, else None."""
    if job.training.strategy != REGIONAL_SYNC:
        return None
    return job.training.regional_sync


def _required(job: BurstJob) -> RegionalSync:
    rs = regional_settings(job)
    if rs is None:
        raise BadInputError(f"spec {job.name}: training.strategy is not regional-sync")
    return rs


def plan_regional_sync(
    job: BurstJob, cat: Catalog, work: Workload, provider: str
) -> dict[str, Any] | None:
    """The plan document's ``regional`` section (``burst.documents.plan.RegionalSyncPlan``),
    or None for a spec that does not train with regional sync."""
    rs = regional_settings(job)
    if rs is None:
        return None
    # imported here: burst.regional's codecs import torch, which a plain plan does not need
    from burst.regional.estimates import plan_regional

    regions = list(rs.regions or (job.data.shards or {}))
    aggregation = rs.aggregation_region or regions[0]
    remote = [r for r in regions if r != aggregation]
    price, price_source = inter_region_price(cat, provider)
    classes = {r: link_class(cat, (provider, r), (provider, aggregation)) for r in remote}
    links = []
    for r in remote:
        ln = cat.link(classes[r])
        links.append(Link(ln["gb_per_s"], ln["latency_ms"], price))
    step_s = work.step_s
    grad_gb = job.model.parameters * cat.assumption("sync_bytes_per_param") / 1e9
    prof = ModelProfile(
        t_f=step_s / 3,
        t_b=step_s * 2 / 3,
        t_u=0.0,
        grad_gb=grad_gb,
        activation_gb=0.0,
        microbatches=1,
    )
    comp = rs.compression
    fraction = rs.sync_fraction
    plan = plan_regional(
        prof,
        [int(job.model.parameters)],
        links,
        job.training.steps,
        codec=comp.codec,
        max_sync_fraction=fraction,
        local_steps=rs.local_steps,
        block_size=comp.block_size,
        topk_fraction=comp.topk_fraction,
        first_local_steps=rs.first_local_steps,
        choose_first=True,
    )
    from burst.regional.defaults import resolve_outer

    h = min(plan.comparison.local_steps, job.training.steps)
    outer = resolve_outer(rs.outer.optimizer, rs.outer.lr, rs.outer.momentum, len(regions), h)
    doc: dict[str, Any] = {
        "strategy": REGIONAL_SYNC,
        "regions": regions,
        "aggregation_region": aggregation,
        "links": classes,
        "egress_price_source": price_source,
        "local_steps_basis": (
            "training.regional_sync.local_steps"
            if rs.local_steps
            else f"planner: smallest H with sync <= {fraction:g} x H x {step_s:.3g} s"
        ),
        "step_s": step_s,
        **plan.to_dict(),
        "rounds_basis": rounds_basis(rs.first_local_steps, plan.first_local_steps, fraction),
        "schedule": Rounds(
            job.training.steps, plan.comparison.local_steps, plan.first_local_steps
        ).describe(),
        "outer_optimizer": rs.outer.optimizer,
        "outer_lr": outer.lr,
        "outer_momentum": outer.momentum,
        "outer_basis": outer.basis,
        "expected_loss_ratio": outer.expected_loss_ratio,
    }
    log.info(
        "regional sync: H %d, %d rounds, %.3g GB a round, bytes ratio %.3g vs sync DP",
        doc["local_steps"],
        doc["rounds"],
        doc["bytes_per_round"] / 1e9,
        doc["bytes_ratio"],
    )
    return doc


def rounds_basis(given: int | None, first: int | None, fraction: float) -> str:
    """Where the plan's round schedule comes from, in words."""
    if given is not None:
        return "training.regional_sync.first_local_steps"
    if first is None:
        return (
            f"planner: constant, no round shorter than H keeps sync <= {fraction:g} x its compute"
        )
    return (
        f"planner: from the shortest round with sync <= {fraction:g} x its compute, doubling to H"
    )


# -- what a regional-sync run is made of (its steps derive their role configs from it; the
# local runner reports it)


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
    rs = _required(job)
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
    rs = _required(job)
    if rs.first_local_steps is not None:
        return rs.first_local_steps, "training.regional_sync.first_local_steps"
    doc, _ = _planned(job)
    first = doc["first_local_steps"]
    return (int(first) if first is not None else None), str(doc["rounds_basis"])


def _planned(job: BurstJob) -> tuple[dict[str, Any], str]:
    """The planner's regional-sync document for ``job`` (the catalog's link, the workload's
    step time) and the basis of that step time."""
    from burst.plan.workload import estimate

    cat = load_catalog()
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    step = estimate(job, cat)
    doc = plan_regional_sync(job, cat, step, provider)
    if doc is None:  # not reached: regional() refused a spec without the strategy
        raise BadInputError(f"spec {job.name}: training.strategy is not regional-sync")
    return doc, step.basis


# -- a region's branch: burst-train's steps, placed in one region

#: Where a role's own state and link log go in its pod on a cluster (scratch: an emptyDir).
POD_SCRATCH = "/tmp/regional"


def branch_region(job: BurstJob) -> str:
    """The region of the branch this step runs in (``BURST_REGION``), one of the spec's
    ``training.regional_sync.regions`` (else bad input, exit 2)."""
    regions = list(regional(job).regions or [])
    region = current().region
    if region not in regions:
        raise BadInputError(
            f"BURST_REGION {region!r} is not one of training.regional_sync.regions "
            f"({', '.join(regions)})"
        )
    return region


def region_candidates(job: BurstJob, region: str, plan: PlanDocument | None) -> list[Candidate]:
    """The plan's priced candidates in ``region`` of the spec's first provider, else the bare
    region (provision's legal gate and recovery strategy then order them as for any run)."""
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    mine = [
        c
        for c in (plan.candidates if plan else [])
        if c.region == region and c.provider == provider
    ]
    return mine or [Candidate(provider=provider, region=region)]


def region_share(job: BurstJob) -> BurstJob:
    """The spec as one region's stack sees the budget: ``budget.max_usd`` over the regions
    (the regions' stacks share it; each is admitted for its share before it rents)."""
    n = max(1, len(regional(job).regions or []))
    return job.model_copy(
        update={"budget": job.budget.model_copy(update={"max_usd": job.budget.max_usd / n})}
    )


def workflow_of(stack_id: str, region: str) -> str:
    """The run's id from a region's stack id (``<workflow>-<region>``)."""
    return stack_id.removesuffix(f"-{region}")


def region_store_spec(region: str, region_uri: str | None) -> dict[str, Any]:
    """The region's own store: on one machine the one the runner stands up for the region
    (``BURST_REGION_SITE``), else the region stack's ``checkpoint_uri`` output (its bucket is
    the region's own)."""
    from burst.storage import open_store

    site = given_site()
    if site is not None:
        if site.region != region:
            raise BadInputError(f"BURST_REGION_SITE is region {site.region}'s, not {region}'s")
        return dict(site.region_store)
    if not region_uri:
        raise BadInputError(f"the {region} stack gave no checkpoint_uri output")
    extra = {"region": region} if region_uri.startswith("s3://") else {}
    return open_store(region_uri, **extra).spec()


def stack_region(job: BurstJob, stack_id: str) -> str:
    """The region of a region's stack id (``<workflow>-<region>``), one of the spec's
    ``training.regional_sync.regions`` (else bad input): what a step that is not told
    ``BURST_REGION`` (teardown, from its stack id alone) knows of its region."""
    for region in sorted(regional(job).regions or [], key=len, reverse=True):
        if stack_id.endswith(f"-{region}"):
            return region
    raise BadInputError(
        f"stack id {stack_id!r} names none of training.regional_sync.regions "
        f"({', '.join(regional(job).regions or [])})"
    )


def worker_store(job: BurstJob, stack_id: str, region_uri: str | None) -> ObjectStore:
    """Where a region's worker keeps its checkpoints and attempt records (``worker/`` of the
    region's store): its train step writes them there, and its teardown confirms the last
    checkpoint and settles the region's ledger entry from there, not from the spec's store
    (where a region's branch writes nothing)."""
    from burst.regional.runtime import subdir_spec
    from burst.regional.stores import WORKER
    from burst.storage import store_from_spec

    region = stack_region(job, stack_id)
    return store_from_spec(subdir_spec(region_store_spec(region, region_uri), WORKER))


def role_config(
    job: BurstJob,
    role: str,
    *,
    stack_id: str,
    runs_root: Path,
    spec_path: Path,
    plan: PlanDocument | None,
    region_uri: str | None = None,
) -> RoleConfig:
    """What the ``train`` step (``role`` worker) or the ``aggregate`` step of a region's
    branch is told about the run: H and the round schedule from the plan's regional section
    (else the spec's or the planner's), the region's own store (the stack's
    ``checkpoint_uri`` output; workers only), the exchange store (the spec's
    ``storage.checkpoint_uri`` under the run's id, ``exchange/``), the links, the run's
    directory (its driver heartbeat). On a cluster the links are real (bytes logged, nothing
    slept); on one machine (``burst run``) the runner's site (``BURST_REGION_SITE``) gives
    the stores, the link emulator and where the role keeps its state."""
    from burst.storage import open_store
    from burst.storage.location import exchange_url

    rs = regional(job)
    region = branch_region(job)
    regions = tuple(rs.regions or [])
    agg = str(rs.aggregation_region)
    if role == "aggregator" and region != agg:
        raise BadInputError(f"the aggregator runs in {agg}, not in {region}")
    local_steps = plan.regional.local_steps if plan and plan.regional else local_steps_for(job)[0]
    local_steps = min(local_steps, job.training.steps)
    first = (
        plan.regional.first_local_steps if plan and plan.regional else first_local_steps_for(job)[0]
    )
    workflow = workflow_of(stack_id, region)
    site = given_site()
    if site is not None and site.region != region:
        raise BadInputError(f"BURST_REGION_SITE is region {site.region}'s, not {region}'s")
    own: dict[str, Any] | None = None
    if site is not None:  # one machine: the stores the runner stands up for this region
        exchange = site.exchange_store
    else:
        exchange = open_store(exchange_url(job.storage.checkpoint_uri, workflow)).spec()
    if role == "worker":
        own = region_store_spec(region, region_uri)
    cfg = RoleConfig(
        spec=str(spec_path),
        role=role,
        region=region,
        aggregation_region=agg,
        regions=regions,
        local_steps=local_steps,
        rounds=rounds_for(job.training.steps, local_steps, first),
        first_local_steps=first,
        region_store=own,
        exchange_store=exchange,
        links=tuple(run_links(job, list(regions))),
        link_log=f"{POD_SCRATCH}/links.jsonl",
        time_scale=0.0,
        state_dir=f"{POD_SCRATCH}/{role}",
        out=f"{POD_SCRATCH}/{role}-result.json",
        run_id=workflow,  # the run's (a worker's leases, metrics)
        run_dir=str(runs_root / workflow),  # the run's directory: its driver heartbeat
    )
    if site is None:
        return cfg
    name = f"{role}-{region}"
    return replace(
        cfg,
        link_log=site.link_log,
        time_scale=site.time_scale,
        state_dir=str(Path(site.state_root) / name),
        out=str(Path(site.results_dir) / f"{name}.json"),
        faults=site.faults.get(role),
        wait_limit_s=site.wait_limit_s,
    )
