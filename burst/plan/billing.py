"""Billing: what a job rents at a site and how many GPUs the provider bills for it.

* A site whose catalog offer sells the GPU type as instances (``gpus_per_instance`` GPUs, and
  the offer's smaller ``shapes``, e.g. a 1-GPU preset beside the 8-GPU node): the job rents
  the smallest instance that holds all its GPUs, else whole instances of the offer (the
  largest shape). Every GPU of a rented instance is billed, used or not: a job of 1 GPU where
  only 8-GPU nodes are sold pays for 8. Such a *partial node* is said in the plan (the
  candidate's ``billing`` line, ``gpus`` against ``gpus_used``, the ``node rounding`` cost
  term) with the nearest GPU counts that use every GPU paid for.
* A site without an offer (a GPU type priced by the catalog's reference price per GPU-hour,
  Rubin; a region the catalog has no instance for) has no instance to round up to: it is
  billed per GPU, ``compute.gpu_count`` GPUs.

docs/planning.md "Partial nodes".
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from burst.plan.catalog import Catalog, Offer
from burst.spec import BurstJob

PER_INSTANCE = "instance"
PER_GPU = "gpu"


@dataclass(frozen=True)
class Billing:
    """The shape a candidate rents and the GPUs it pays for."""

    offer: Offer | None  # the instance rented (None: billed per GPU, no instance known)
    nodes: int  # instances (nodes) rented
    gpus: int  # GPUs billed: nodes x the instance's GPUs, or the job's GPUs per GPU
    gpus_used: int  # the spec's compute.gpu_count
    per: str  # PER_INSTANCE | PER_GPU
    note: str  # how it is billed, in words (a partial node: the nearest shapes)

    @property
    def unit_gpus(self) -> int:
        """GPUs of one billed unit: an instance, or one GPU."""
        if self.per == PER_INSTANCE and self.offer is not None:
            return self.offer.gpus_per_instance
        return 1

    @property
    def units(self) -> int:
        """Billed units: instances, or GPUs."""
        return self.nodes if self.per == PER_INSTANCE else self.gpus

    @property
    def idle_gpus(self) -> int:
        return self.gpus - self.gpus_used

    @property
    def partial(self) -> bool:
        return self.idle_gpus > 0


def _sold_as(shapes: list[Offer]) -> str:
    sizes = [f"{s.instance} ({s.gpus_per_instance} GPU{'s' if s.gpus_per_instance > 1 else ''})"
             for s in shapes]  # fmt: skip
    return f"only as {sizes[0]}" if len(sizes) == 1 else "as " + " or ".join(sizes)


def nearest_counts(want: int, shapes: list[Offer]) -> tuple[int | None, int]:
    """The GPU counts nearest ``want`` (below, above) that the rule bills without an idle GPU:
    one instance of any shape, or whole instances of the largest."""
    largest = shapes[-1].gpus_per_instance
    totals = {s.gpus_per_instance for s in shapes}
    totals |= {largest * max(1, want // largest), largest * math.ceil(want / largest)}
    below = [t for t in totals if t < want]
    above = [t for t in totals if t > want]
    return (max(below) if below else None), min(above)


def billing_for(cat: Catalog, job: BurstJob, provider: str, region: str) -> Billing:
    """How ``provider`` bills the job's GPUs in ``region`` (the rule of the module doc)."""
    want = job.compute.gpu_count
    gpu = job.compute.gpu_type
    shapes = cat.shapes_of(provider, region, gpu)
    if not shapes:
        nodes = max(1, math.ceil(want / job.compute.gpus_per_node))
        return Billing(
            None,
            nodes,
            want,
            want,
            PER_GPU,
            f"billed per GPU-hour: the catalog lists no {gpu} instance for {provider}/{region} "
            f"(the price is per GPU-hour), so {want} GPU(s) are priced, no node rounding",
        )
    fits = [s for s in shapes if s.gpus_per_instance >= want]
    shape = fits[0] if fits else shapes[-1]
    per = shape.gpus_per_instance
    nodes = math.ceil(want / per)
    gpus = nodes * per
    if gpus == want:
        note = f"{nodes} x {shape.instance} ({per} GPUs each): every GPU billed is used"
    else:
        below, above = nearest_counts(want, shapes)
        near = f"{below} or {above}" if below is not None else str(above)
        note = (
            f"partial node: {want} of {gpus} GPUs used: {provider} sells {gpu} in {region} "
            f"{_sold_as(shapes)} and bills every GPU of an instance, so {gpus - want} idle "
            f"GPU(s) are paid for; nearest shape: compute.gpu_count {near}"
        )
    return Billing(shape, nodes, gpus, want, PER_INSTANCE, note)
