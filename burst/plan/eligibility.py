"""Eligibility: which (provider, region) pairs may be priced at all, and why the others not.

A pair is left out (with its reason, in the plan's ``excluded``) when it is not in the
catalog, has no stack, has no preflight decision (fail closed) or a ``deny``, its GPU is
unavailable there, its data cannot reach it, or the region supplies fewer GPUs than the job
needs. What is left is a ``Site``: the pair with everything pricing needs to know about it,
including what it rents and bills (``burst.plan.billing``: the instance shape, partial nodes).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from burst.documents import Decision, DecisionRecord, parse_document
from burst.errors import PolicyRefusal
from burst.plan import datastrategy
from burst.plan.billing import Billing, billing_for
from burst.plan.catalog import Catalog, Offer
from burst.plan.crossregion import recommend_span
from burst.providers import no_stack_reason, stack_for, store_refusal
from burst.settings import current
from burst.spec import BurstJob


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


def index_decisions(record: DecisionRecord | None) -> dict[tuple[str, str], Decision] | None:
    """The preflight decision record by (provider, region); None when none was given."""
    if record is None:
        return None
    return {(d.provider, d.region): d for d in record.decisions}


@dataclass
class Exclusions:
    """The plan's ``excluded`` list, in the order candidates were left out."""

    items: list[dict[str, Any]] = field(default_factory=list)

    def add(
        self, provider: str, region: str, capacity: str | None, reason: str, **extra: Any
    ) -> None:
        self.items.append(
            {"provider": provider, "region": region, "capacity": capacity, "reason": reason} | extra
        )


@dataclass(frozen=True)
class Site:
    """An eligible (provider, region): what pricing needs to know about it."""

    provider: str
    region: str
    offer: Offer | None  # the instance rented (the offer, or a smaller shape of it)
    availability: str  # available | unknown
    verdict: str  # allow | review | unchecked
    decision: Decision | None
    data: datastrategy.DataPlan
    billing: Billing

    @property
    def nodes(self) -> int:
        return self.billing.nodes


@dataclass(frozen=True)
class DataInputs:
    """Where the data is (region -> GB, None: outside any cloud region) and the model syncs
    that regional shards would cost."""

    shards: dict[str, float] | None
    sync_gb: float
    sync_rounds: int


def known_int(offer: Offer | None, name: str) -> int | None:
    fact = offer.fact(name) if offer else None
    return int(fact.value) if fact is not None and fact.value is not None else None


def supply(cat: Catalog, job: BurstJob, provider: str, region: str) -> dict[str, int | None]:
    """GPUs one zone, the region, the regions of its area and all the spec's regions can
    supply (catalog ``max_gpus_per_zone`` / ``max_gpus``; None when any is unknown)."""
    gpu = job.compute.gpu_type
    offer = cat.offer(provider, region, gpu)

    def total(regions: list[str]) -> int | None:
        counts = [known_int(cat.offer(provider, r, gpu), "max_gpus") for r in regions]
        return None if any(n is None for n in counts) else sum(n or 0 for n in counts)

    area = cat.area(provider, region)
    same_area = [r for r in job.compute.regions if cat.area(provider, r) == area]
    everywhere = [r for r in job.compute.regions if (provider, r) in cat.regions]
    return {
        "same_az": known_int(offer, "max_gpus_per_zone"),
        "cross_az": known_int(offer, "max_gpus"),
        "cross_region": total(same_area),
        "cross_continent": total(everywhere),
    }


def _runnable(
    job: BurstJob,
    cat: Catalog,
    decisions: dict[tuple[str, str], Decision] | None,
    provider: str,
) -> set[str]:
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
        off = cat.offer(provider, r, job.compute.gpu_type)
        if off is not None and str(off.facts["availability"].value) == "unavailable":
            continue
        out.add(r)
    return out


def eligible_sites(
    job: BurstJob,
    cat: Catalog,
    record: DecisionRecord | None,
    data_in: DataInputs,
    excluded: Exclusions,
) -> tuple[list[Site], dict[tuple[str, str], list[datastrategy.DataPlan]]]:
    """Every eligible (provider, region) in the spec's order, providers first; the others go
    to ``excluded``. Also the data strategies weighed for each pair."""
    decisions = index_decisions(record)
    gpu_type = job.compute.gpu_type
    stack_mode = current().tf_stack  # BURST_TF_STACK: what provision will apply
    sites: list[Site] = []
    data_options: dict[tuple[str, str], list[datastrategy.DataPlan]] = {}
    for provider in job.compute.providers:
        for region in job.compute.regions:
            if (provider, region) not in cat.regions:
                excluded.add(
                    provider,
                    region,
                    None,
                    f"{region} is not in the catalog for provider {provider}",
                )
                continue
            kind = stack_for(provider)
            if kind is None:
                excluded.add(provider, region, None, no_stack_reason(provider))
                continue
            # a cloud stack whose checkpoint store burst cannot open: refused here, not in
            # train's pod on rented GPUs (the local stack's store is a directory)
            if stack_mode != "local" and (why := store_refusal(kind)) is not None:
                excluded.add(provider, region, None, why)
                continue
            decision = None
            verdict = "unchecked"
            if decisions is not None:
                decision = decisions.get((provider, region))
                if decision is None:
                    excluded.add(
                        provider,
                        region,
                        None,
                        "no preflight decision for this candidate (fail closed)",
                    )
                    continue
                verdict = decision.verdict
                if verdict == "deny":
                    excluded.add(
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
                excluded.add(
                    provider,
                    region,
                    None,
                    f"{gpu_type} is unavailable there (catalog: "
                    f"{offer.facts['availability'].source if offer else ''})",
                )
                continue
            may_move = True if record is None else record.may_move(decision)
            if data_in.shards is None:  # data outside any cloud region
                data = datastrategy.for_candidate(
                    cat, job.data.size_gb, None, (provider, region), may_move
                )
                data_options[(provider, region)] = [data]
            else:
                data, data_options[(provider, region)] = datastrategy.choose(
                    cat,
                    data_in.shards,
                    (provider, region),
                    may_move,
                    sync_gb=data_in.sync_gb,
                    sync_rounds=data_in.sync_rounds,
                    runnable=_runnable(job, cat, decisions, provider),
                )
            if not data.feasible:
                excluded.add(provider, region, None, data.reason)
                continue
            region_gpus = known_int(offer, "max_gpus")
            if region_gpus is not None and region_gpus < job.compute.gpu_count:
                excluded.add(
                    provider,
                    region,
                    None,
                    f"the region supplies at most {region_gpus} {gpu_type} (catalog max_gpus), "
                    f"the job needs {job.compute.gpu_count}: "
                    + recommend_span(
                        job.compute.gpu_count, supply(cat, job, provider, region)
                    ).reason,
                )
                continue
            billing = billing_for(cat, job, provider, region)
            sites.append(
                Site(
                    provider,
                    region,
                    billing.offer or offer,
                    availability,
                    verdict,
                    decision,
                    data,
                    billing,
                )
            )
    return sites, data_options
