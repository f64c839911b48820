"""``burst plan --explain``: burst's figure beside each seed's simple model, and why they differ.

The seeds price a run with formulas a reader can check by hand; burst prices the same run by
simulating pre-emptions, start-up and checkpoints. For the plan's first candidate this module
evaluates each seed's formula on the run's own inputs (GPU hours, prices, data, storage) and
names every difference between it and burst's figure, with both numbers:

* seed 000 (data gravity): moving the dataset once = size x the inter-region price per GB;
* seed 001 (spot vs on-demand): on demand = hours x on-demand price; spot = hours x spot price
  + lost hours (2 h per 24 h job) re-run at the on-demand price;
* seed 003 (total cost): GPU hours x price + egress + storage GB-month (a month) x price +
  orchestration + labour.

The seeds count the job's GPUs; burst bills every GPU it rents (``burst.plan.billing``): a
partial node's idle GPUs are a difference of their own. ``term_lines`` prints the first
candidate's cost term by term (the plan's ``cost_terms``), the terms summing to the total.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from burst.plan import pricing
from burst.plan.billing import billing_for
from burst.plan.catalog import Catalog
from burst.plan.datastrategy import DATA_TO_COMPUTE, inter_region_price, providers_of
from burst.spec import BurstJob

#: seed 001: "Average preemption overhead per 24h job: 2 hours lost"
SEED_001_LOST_HOURS_PER_24H = 2.0
HOURS_PER_MONTH_SEED = 730.0  # what "a month" is in burst.plan.cost (seed 003 prices GB-months)


@dataclass
class SeedCheck:
    """One seed formula on this run's inputs, beside burst's figure for the same thing."""

    seed: str
    what: str
    formula: str
    seed_usd: float
    burst_usd: float | None  # None: burst has no such candidate (compute.capacity)
    burst_what: str
    differences: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _money(x: float) -> str:
    return f"${x:,.2f}"


def _site_prices(
    cat: Catalog, job: BurstJob, cand: dict[str, Any]
) -> tuple[float | None, float | None]:
    """Spot and on-demand price per GPU-hour at the candidate's site, for the shape it rents
    (None: not known)."""
    bill = billing_for(cat, job, cand["provider"], cand["region"])
    out: list[float | None] = []
    for capacity in ("spot", "on_demand"):
        p = pricing.instance_price(cat, bill.offer, job.compute.gpu_type, bill.unit_gpus, capacity)
        out.append(None if p is None else p.per_unit_hour / bill.unit_gpus)
    return out[0], out[1]


def _used(cand: dict[str, Any]) -> int:
    """The job's GPUs (what the seeds count); a plan without ``gpus_used``: the rented."""
    return int(cand.get("gpus_used") or cand["gpus"])


def _rounding(cand: dict[str, Any]) -> list[str]:
    """The partial-node difference: burst bills GPUs the job does not use."""
    idle = int(cand["gpus"]) - _used(cand)
    if idle <= 0:
        return []
    return [
        f"node rounding: the seed counts the job's {_used(cand)} GPU(s); burst bills the "
        f"{cand['gpus']} rented ({cand.get('billing') or 'whole instances'})"
    ]


def _paid_hours(cand: dict[str, Any]) -> float:
    """Wall hours the candidate's nodes are paid (start-up, training, pre-emptions)."""
    return float(cand["expected_hours"]) - float(cand.get("data_transfer_hours") or 0.0)


def seed_000(job: BurstJob, cat: Catalog, doc: dict[str, Any]) -> SeedCheck:
    data = doc["data"]
    size_gb = float(data["size_gb"])
    moved = next(
        (
            o
            for o in data.get("alternatives", [])
            if o["strategy"] == DATA_TO_COMPUTE and o["egress_gb"] > 0
        ),
        None,
    )
    if moved is not None:
        rate, source = moved["egress_usd"] / moved["egress_gb"], moved.get("price_source", "")
    else:
        found = providers_of(cat, data["region"]) if data.get("region") else []
        src = found[0] if found else None
        rate, source = inter_region_price(cat, src)
    first = doc["candidates"][0]
    check = SeedCheck(
        seed="seed 000",
        what="moving the dataset once",
        formula=f"{size_gb:,.6g} GB x ${rate:g}/GB = {_money(size_gb * rate)}",
        seed_usd=round(size_gb * rate, 2),
        burst_usd=round(float(first["egress_usd"]), 2),
        burst_what=f"egress of {first['provider']}/{first['region']} ({first['data_strategy']})",
    )
    check.differences.append(f"price per GB: {source or 'the catalog'}")
    if first["data_strategy"] != DATA_TO_COMPUTE:
        check.differences.append(
            f"burst does not move the dataset: strategy {first['data_strategy']} "
            f"({first.get('data_reason') or ''})"
        )
    return check


def seed_001(job: BurstJob, cat: Catalog, doc: dict[str, Any]) -> list[SeedCheck]:
    first = doc["candidates"][0]
    gpus = int(first["gpus"])
    useful_h = float(doc["workload"]["compute_hours"])
    gpu_h = useful_h * _used(first)
    spot_p, od_p = _site_prices(cat, job, first)
    if spot_p is None or od_p is None:
        return []
    lost_h = gpu_h * SEED_001_LOST_HOURS_PER_24H / 24.0
    site = (first["provider"], first["region"])
    same_site = {
        c["capacity"]: c for c in doc["candidates"] if (c["provider"], c["region"]) == site
    }
    startup_h = cat.assumption("startup_s") / 3600.0
    out = []
    od = same_site.get("on_demand")
    check = SeedCheck(
        seed="seed 001",
        what="on demand",
        formula=f"{gpu_h:,.4g} GPU-h x ${od_p:g} = {_money(gpu_h * od_p)}",
        seed_usd=round(gpu_h * od_p, 2),
        burst_usd=round(float(od["compute_usd"]), 2) if od else None,
        burst_what="compute of the on-demand candidate"
        if od
        else "no on-demand candidate (compute.capacity)",
    )
    if od is not None:
        check.differences.append(
            f"start-up: burst pays {startup_h:.3g} h a run (catalog startup_s), the seed none; "
            f"burst's paid hours {_paid_hours(od):.4g} x {gpus} GPU(s)"
        )
        check.differences += _rounding(od)
    out.append(check)
    spot = same_site.get("spot") or same_site.get("spot_with_floor")
    check = SeedCheck(
        seed="seed 001",
        what="spot",
        formula=(
            f"{gpu_h:,.4g} GPU-h x ${spot_p:g} + {lost_h:.3g} h lost x ${od_p:g} on demand = "
            f"{_money(gpu_h * spot_p + lost_h * od_p)}"
        ),
        seed_usd=round(gpu_h * spot_p + lost_h * od_p, 2),
        burst_usd=round(float(spot["compute_usd"]), 2) if spot else None,
        burst_what="compute of the spot candidate"
        if spot
        else "no spot candidate (compute.capacity)",
    )
    if spot is not None:
        paid = _paid_hours(spot)
        burst_lost = max(paid - useful_h - startup_h, 0.0) * _used(spot)
        check.differences += [
            f"re-run: burst re-runs lost work on the same spot capacity (${spot_p:g}/GPU-h); "
            f"the seed prices it at the on-demand ${od_p:g}/GPU-h",
            f"lost hours: the seed assumes {SEED_001_LOST_HOURS_PER_24H:g} h per 24 h job "
            f"({lost_h:.3g} GPU-h); burst simulates {burst_lost:.3g} GPU-h lost and restarting "
            f"(job MTBF {spot['mtbf_hours']:.3g} h, checkpoint every "
            f"{spot['checkpoint_interval_s']:.4g} s, goodput {spot['goodput']:.3f})",
            f"start-up: burst pays {startup_h:.3g} h a run (catalog startup_s), the seed none",
            *_rounding(spot),
        ]
    out.append(check)
    return out


def seed_003(job: BurstJob, cat: Catalog, doc: dict[str, Any]) -> SeedCheck:
    first = doc["candidates"][0]
    gpu_h = float(doc["workload"]["compute_hours"]) * _used(first)
    price = float(first["price_per_gpu_hour"])
    egress = float(first["egress_usd"])
    storage_gb = float(first.get("storage_gb") or 0.0)
    storage_price = pricing.storage_price(cat, first["provider"])
    month = storage_gb * storage_price
    orch, labour = float(first["orchestration_usd"]), float(first["labour_usd"])
    total = gpu_h * price + egress + month + orch + labour
    check = SeedCheck(
        seed="seed 003",
        what="total cost",
        formula=(
            f"{gpu_h:,.4g} GPU-h x ${price:g} + egress {_money(egress)} + storage "
            f"{storage_gb:,.4g} GB-month x ${storage_price:g} + orchestration {_money(orch)} "
            f"+ labour {_money(labour)} = {_money(total)}"
        ),
        seed_usd=round(total, 2),
        burst_usd=round(float(first["expected_cost_usd"]), 2),
        burst_what=f"expected cost of {first['provider']}/{first['region']} {first['capacity']}",
    )
    paid_gpu_h = float(first["paid_gpu_hours"])
    check.differences += [
        f"GPU hours: the seed counts the useful {gpu_h:,.4g}; burst pays {paid_gpu_h:,.4g} "
        f"(start-up, pre-emptions, checkpoints: {_money(float(first['compute_usd']))})",
        f"storage: the seed prices a month ({_money(month)}); burst the run's "
        f"{_paid_hours(first) + float(first.get('data_transfer_hours') or 0):.4g} h of it "
        f"({_money(float(first['storage_usd']))})",
        *_rounding(first),
    ]
    return check


def explain(job: BurstJob, cat: Catalog, doc: dict[str, Any]) -> list[SeedCheck]:
    """Each seed formula on the plan's first candidate, beside burst's figure."""
    return [seed_000(job, cat, doc), *seed_001(job, cat, doc), seed_003(job, cat, doc)]


def render(checks: list[SeedCheck]) -> list[str]:
    """The explanation as lines of text."""
    lines = ["burst against the seeds' simple models (for the first candidate):"]
    for c in checks:
        burst = "n/a" if c.burst_usd is None else _money(c.burst_usd)
        lines.append(f"{c.seed} {c.what}: seed {_money(c.seed_usd)}, burst {burst}")
        lines.append(f"  seed formula: {c.formula}")
        lines.append(f"  burst: {c.burst_what}")
        lines += [f"  - {d}" for d in c.differences]
    return lines


def _cents(values: list[float], total: float) -> list[int]:
    """``values`` in whole cents that add up to ``total``'s cents (largest remainder)."""
    want = round(total * 100)
    floors = [int(v * 100 // 1) for v in values]
    rest = sorted(range(len(values)), key=lambda i: values[i] * 100 - floors[i], reverse=True)
    short = want - sum(floors)
    for i in rest[: max(short, 0)]:
        floors[i] += 1
    for i in list(reversed(rest))[: max(-short, 0)]:
        floors[i] -= 1
    return floors


def term_lines(cand: dict[str, Any]) -> list[str]:
    """The candidate's expected cost term by term (its ``cost_terms``); the cents shown add
    up to the total shown."""
    terms = cand.get("cost_terms") or []
    total = float(cand["expected_cost_usd"])
    cents = _cents([float(t["usd"]) for t in terms], total)
    lines = [
        f"expected cost of {cand['provider']}/{cand['region']} {cand['capacity']}, term by term "
        f"({cand['gpus']} GPU(s) billed, {cand.get('gpus_used') or cand['gpus']} used: "
        f"{cand.get('billing') or 'billing not recorded'}):"
    ]
    for t, c in zip(terms, cents, strict=True):
        sign = "-" if c < 0 else ""
        lines.append(f"  {t['term']}: {sign}${abs(c) / 100:,.2f} ({t['detail']})")
    lines.append(f"  = total ${total:,.2f} (the table's exp. cost)")
    return lines
