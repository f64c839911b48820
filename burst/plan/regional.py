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
"""

from __future__ import annotations

import logging
from typing import Any

from burst.plan.catalog import Catalog
from burst.plan.crossregion import Link, ModelProfile
from burst.plan.datastrategy import inter_region_price, link_class
from burst.plan.workload import Workload
from burst.regional.rounds import Rounds
from burst.spec import BurstJob, RegionalSync

log = logging.getLogger(__name__)

REGIONAL_SYNC = "regional-sync"


def regional_settings(job: BurstJob) -> RegionalSync | None:
    """The spec's ``training.regional_sync`` when the strategy is regional-sync, else None."""
    if job.training.strategy != REGIONAL_SYNC:
        return None
    return job.training.regional_sync


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
