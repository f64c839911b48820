"""The data strategy (seed 000): bring compute to the data, bring the data to compute, or
train on regional shards, chosen from dataset size, egress prices, link bandwidth and the
preflight verdicts. Data that may not leave never moves: a candidate that would need it to
is infeasible. ``choose`` is what placement calls for every candidate; ``compare`` ranks the
three for a fixed set of shards and one target, whatever the candidates.

Prices: moving data between regions is charged on the source side at the source provider's
``inter_region_usd_per_gb``; when that is unknown, the highest inter-region price in the catalog
is used (conservative, and said so). Transfer time uses the catalog's link class between the
two regions (same area: ``cross_region``, different areas or unknown: ``cross_continent``).
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import asdict, dataclass, replace
from typing import Any

from burst.plan.catalog import Catalog
from burst.plan.cost import egress_cost

COMPUTE_TO_DATA = "compute_to_data"
DATA_TO_COMPUTE = "data_to_compute"
REGIONAL_SHARDS = "regional_shards"


@dataclass(frozen=True)
class DataPlan:
    strategy: str
    feasible: bool
    egress_gb: float
    egress_usd: float
    transfer_hours: float
    reason: str
    price_source: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def providers_of(cat: Catalog, region: str) -> list[str]:
    return sorted(p for (p, r) in cat.regions if r == region)


def link_class(cat: Catalog, src: tuple[str, str] | None, dst: tuple[str, str]) -> str:
    """The seed 002 link class between two (provider, region) locations."""
    if src == dst:
        return "same_az"
    if src is None:
        return "cross_continent"
    a, b = cat.area(*src), cat.area(*dst)
    if a is not None and a == b and src[0] == dst[0]:
        return "cross_region"
    return "cross_continent"


def inter_region_price(cat: Catalog, provider: str | None) -> tuple[float, str]:
    """USD per GB leaving ``provider``'s region, and where the number comes from."""
    fact = cat.provider_fact(provider, "inter_region_usd_per_gb") if provider else None
    if fact is not None and fact.value is not None:
        return float(fact.value), f"providers.{provider}.inter_region_usd_per_gb ({fact.source})"
    known = [
        (float(f["inter_region_usd_per_gb"].value), name)
        for name, f in cat.providers.items()
        if f.get("inter_region_usd_per_gb") and f["inter_region_usd_per_gb"].value is not None
    ]
    if not known:
        return 0.0, "no inter-region price in the catalog"
    price, name = max(known)
    return price, (
        f"unknown for {provider or 'the data source'}: highest known inter-region "
        f"price used (providers.{name})"
    )


def for_candidate(
    cat: Catalog,
    size_gb: float,
    data_region: str | None,
    candidate: tuple[str, str],
    may_move: bool,
) -> DataPlan:
    """The strategy one candidate (provider, region) implies for data stored in one region."""
    provider, region = candidate
    if data_region == region:
        return DataPlan(COMPUTE_TO_DATA, True, 0.0, 0.0, 0.0, f"the data is already in {region}")
    if not may_move:
        where = data_region or "its origin"
        return DataPlan(
            DATA_TO_COMPUTE,
            False,
            size_gb,
            0.0,
            0.0,
            f"the data may not leave {where} (preflight); it never moves",
        )
    if data_region is None:
        link = cat.link("cross_continent")
        return DataPlan(
            DATA_TO_COMPUTE,
            True,
            size_gb,
            0.0,
            size_gb / link["gb_per_s"] / 3600.0,
            "data location is not a cloud region: ingress is free (facts-3); the source's own "
            "egress is not in the catalog; transfer time at the cross_continent bandwidth",
            "ingress",
        )
    owners = providers_of(cat, data_region)
    src_provider = provider if provider in owners else (owners[0] if owners else None)
    src = (src_provider, data_region) if src_provider else None
    cls = link_class(cat, src, (provider, region))
    price, price_source = inter_region_price(cat, src_provider)
    hours = size_gb / cat.link(cls)["gb_per_s"] / 3600.0
    return DataPlan(
        DATA_TO_COMPUTE,
        True,
        size_gb,
        egress_cost(size_gb, price),
        hours,
        f"move {size_gb:g} GB from {data_region} to {region} ({cls} link)",
        price_source,
    )


def compare(
    cat: Catalog,
    shards_gb: Mapping[str, float],
    target: tuple[str, str],
    may_move: Mapping[str, bool],
    sync_gb: float = 0.0,
    sync_rounds: int = 0,
) -> list[DataPlan]:
    """All three strategies for data sharded over regions, cheapest feasible first.

    * compute_to_data: train where the largest shard is; the other shards come to it.
    * data_to_compute: every shard moves to ``target``.
    * regional_shards: each shard is trained where it lives, and the model is synchronised
      ``sync_rounds`` times by sending ``sync_gb`` between every other region and ``target``
      (seed 000's regional workers with periodic global sync); no training data moves.
    """
    provider = target[0]
    plans: list[DataPlan] = []

    def moved(dst: str) -> DataPlan:
        gb = usd = hours = 0.0
        blocked = [r for r in shards_gb if r != dst and not may_move.get(r, True)]
        for r, size in shards_gb.items():
            if r == dst:
                continue
            p = for_candidate(cat, size, r, (provider, dst), True)
            gb, usd, hours = gb + p.egress_gb, usd + p.egress_usd, max(hours, p.transfer_hours)
        if blocked:
            return DataPlan(
                "",
                False,
                gb,
                usd,
                hours,
                f"data in {', '.join(blocked)} may not leave; it never moves",
            )
        return DataPlan("", True, gb, usd, hours, f"all shards in {dst}")

    home = max(shards_gb, key=lambda r: shards_gb[r])
    p = moved(home)
    plans.append(
        DataPlan(
            COMPUTE_TO_DATA,
            p.feasible,
            p.egress_gb,
            p.egress_usd,
            p.transfer_hours,
            f"train in {home} (largest shard); {p.reason}",
        )
    )
    p = moved(target[1])
    plans.append(
        DataPlan(
            DATA_TO_COMPUTE,
            p.feasible,
            p.egress_gb,
            p.egress_usd,
            p.transfer_hours,
            f"train in {target[1]}; {p.reason}",
        )
    )
    others = [r for r in shards_gb if r != target[1]]
    gb = sync_gb * sync_rounds * len(others) * 2  # deltas out and the merged model back
    usd = sum(
        egress_cost(sync_gb * sync_rounds, inter_region_price(cat, provider)[0]) * 2 for _ in others
    )
    plans.append(
        DataPlan(
            REGIONAL_SHARDS,
            len(shards_gb) > 1,
            gb,
            usd,
            0.0,
            f"train on each region's shard, {sync_rounds} syncs of {sync_gb:g} GB"
            if len(shards_gb) > 1
            else "only one shard: nothing to shard",
        )
    )
    return sorted(plans, key=lambda d: (not d.feasible, d.egress_usd, d.transfer_hours))


def _sync(
    cat: Catalog,
    others: list[str],
    target: tuple[str, str],
    sync_gb: float,
    sync_rounds: int,
) -> tuple[float, float, float]:
    """GB, USD and hours of ``sync_rounds`` model syncs between each region in ``others`` and
    the hub ``target``: ``sync_gb`` out to the hub (charged at the shard's region) and the
    merged model back (charged at the hub); time over the link class, regions in parallel."""
    provider = target[0]
    price, _ = inter_region_price(cat, provider)
    per_round = sync_gb * 2
    gb = per_round * sync_rounds * len(others)
    usd = sum(egress_cost(per_round * sync_rounds, price) for _ in others)
    hours = max(
        (
            sync_rounds
            * per_round
            / cat.link(link_class(cat, (provider, r), target))["gb_per_s"]
            / 3600.0
            for r in others
        ),
        default=0.0,
    )
    return gb, usd, hours


def choose(
    cat: Catalog,
    shards: Mapping[str, float],
    target: tuple[str, str],
    may_move: bool,
    *,
    sync_gb: float,
    sync_rounds: int,
    runnable: Set[str],
) -> tuple[DataPlan, list[DataPlan]]:
    """The data strategy for one candidate ``target`` (provider, region), chosen among the
    three from the shard sizes, egress prices, link bandwidth and the preflight verdicts;
    returns (chosen, all three). The cheapest feasible one wins (egress USD, then hours).

    * compute_to_data: the candidate holds the largest shard; any other shards come to it.
    * data_to_compute: the candidate holds no shard or a smaller one; every shard not there
      moves to it.
    * regional_shards: the candidate holds a shard and is the hub; every shard region trains
      on its own shard and syncs the model with the hub ``sync_rounds`` times (``sync_gb``
      each way); no training data moves. Needs more than one shard and a runnable candidate
      (in the spec, in the catalog, not denied by the preflight) in every shard region.

    ``may_move`` is the preflight's answer for moving the data to ``target`` (data_may_move);
    when false no shard moves there, and only training where the data is stays possible.
    """
    provider, region = target
    others = {r: gb for r, gb in shards.items() if r != region}
    home = max(shards, key=lambda r: (shards[r], r == region))

    if not others:
        gathered = DataPlan("", True, 0.0, 0.0, 0.0, f"the data is already in {region}")
    elif not may_move:
        gathered = DataPlan(
            "",
            False,
            sum(others.values()),
            0.0,
            0.0,
            f"the data may not leave {', '.join(sorted(others))} (preflight); it never moves",
        )
    else:
        parts = [for_candidate(cat, gb, r, target, True) for r, gb in sorted(others.items())]
        gathered = DataPlan(
            "",
            True,
            sum(p.egress_gb for p in parts),
            sum(p.egress_usd for p in parts),
            max(p.transfer_hours for p in parts),
            "; ".join(p.reason for p in parts),
            parts[0].price_source,
        )

    if region == home:
        c2d = replace(gathered, strategy=COMPUTE_TO_DATA)
        d2c = DataPlan(
            DATA_TO_COMPUTE,
            False,
            0.0,
            0.0,
            0.0,
            f"{region} holds the largest shard: that is compute_to_data",
        )
    else:
        c2d = DataPlan(
            COMPUTE_TO_DATA,
            False,
            0.0,
            0.0,
            0.0,
            f"the largest shard is in {home}, not {region} (another candidate)",
        )
        d2c = replace(gathered, strategy=DATA_TO_COMPUTE)

    missing = sorted(r for r in shards if r not in runnable)
    if len(shards) < 2:
        rs = DataPlan(REGIONAL_SHARDS, False, 0.0, 0.0, 0.0, "one shard: nothing to shard")
    elif region not in shards:
        rs = DataPlan(
            REGIONAL_SHARDS,
            False,
            0.0,
            0.0,
            0.0,
            f"{region} holds no shard: regional training runs where the shards are",
        )
    elif missing:
        rs = DataPlan(
            REGIONAL_SHARDS,
            False,
            0.0,
            0.0,
            0.0,
            f"no runnable {provider} candidate in {', '.join(missing)} (not in the spec's "
            "regions, not in the catalog, or denied by the preflight)",
        )
    else:
        gb, usd, hours = _sync(cat, sorted(others), target, sync_gb, sync_rounds)
        rs = DataPlan(
            REGIONAL_SHARDS,
            True,
            gb,
            usd,
            hours,
            f"train on each shard where it lives ({', '.join(sorted(shards))}), hub {region}: "
            f"{sync_rounds} syncs of {sync_gb:.3g} GB each way; no training data moves",
            inter_region_price(cat, provider)[1],
        )
    options = [c2d, d2c, rs]
    feasible = [o for o in options if o.feasible]
    if feasible:
        return min(feasible, key=lambda o: (o.egress_usd, o.transfer_hours)), options
    return (c2d if region == home else d2c), options
