"""The cost model: pure functions, US dollars, hours, decimal GB.

GB convention: burst uses decimal units, 1 GB = 1e9 bytes and 1 TB = 1000 GB. That is how
seed 000's "100 TB at $0.09/GB ~ $9,000" comes out exactly (binary TiB would give $9,216).

* ``total_cost`` is seed 003's model: GPU hours x price + egress GB x price + storage
  GB-months x price + orchestration + labour.
* ``on_demand_cost`` and ``spot_cost_with_rerun`` are seed 001's worked example: the re-run
  hours lost to pre-emptions are priced at the on-demand rate.
* ``expected_spot_cost`` refines seed 001: the paid hours come from the goodput (useful
  time / paid time) of the Young/Daly-checkpointed run, from ``burst.plan.goodput``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

GB_PER_TB = 1000.0
BYTES_PER_GB = 1e9
HOURS_PER_MONTH = 730.0  # 365 * 24 / 12, the usual cloud billing month


def tb_to_gb(tb: float) -> float:
    return tb * GB_PER_TB


def bytes_to_gb(n: float) -> float:
    return n / BYTES_PER_GB


def egress_cost(gb: float, usd_per_gb: float) -> float:
    """Moving ``gb`` once at ``usd_per_gb`` (charged on the source side)."""
    if gb < 0 or usd_per_gb < 0:
        raise ValueError("egress volume and price must be >= 0")
    return gb * usd_per_gb


def storage_gb_months(gb: float, hours: float) -> float:
    """GB-months of keeping ``gb`` for ``hours``."""
    return gb * hours / HOURS_PER_MONTH


@dataclass(frozen=True)
class CostBreakdown:
    gpu_usd: float
    egress_usd: float
    storage_usd: float
    orchestration_usd: float
    labour_usd: float

    @property
    def total_usd(self) -> float:
        return (
            self.gpu_usd
            + self.egress_usd
            + self.storage_usd
            + self.orchestration_usd
            + self.labour_usd
        )

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "total_usd": self.total_usd}


@dataclass(frozen=True)
class CostTerm:
    """One named term of a candidate's expected cost (``burst plan --explain``): the terms of
    a candidate sum to its ``expected_cost_usd``."""

    term: str
    usd: float
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"term": self.term, "usd": round(self.usd, 6), "detail": self.detail}


def total_cost(
    gpu_hours: float,
    gpu_price_per_hour: float,
    egress_gb: float = 0.0,
    egress_price_per_gb: float = 0.0,
    storage_gb_month: float = 0.0,
    storage_price_per_gb_month: float = 0.0,
    orchestration_usd: float = 0.0,
    labour_usd: float = 0.0,
) -> CostBreakdown:
    """Seed 003: Total = GPU_Hours x GPU_Price + Egress_GB x Egress_Price
    + Storage_GB_Month x Storage_Price + Orchestration + Labour."""
    values = (
        gpu_hours,
        gpu_price_per_hour,
        egress_gb,
        egress_price_per_gb,
        storage_gb_month,
        storage_price_per_gb_month,
        orchestration_usd,
        labour_usd,
    )
    if any(v < 0 for v in values):
        raise ValueError("cost model inputs must be >= 0")
    return CostBreakdown(
        gpu_usd=gpu_hours * gpu_price_per_hour,
        egress_usd=egress_cost(egress_gb, egress_price_per_gb),
        storage_usd=storage_gb_month * storage_price_per_gb_month,
        orchestration_usd=orchestration_usd,
        labour_usd=labour_usd,
    )


def on_demand_cost(hours: float, price_per_hour: float) -> float:
    """Seed 001: ``hours`` of on-demand capacity."""
    return hours * price_per_hour


def spot_cost_with_rerun(
    hours: float, spot_price_per_hour: float, rerun_hours: float, rerun_price_per_hour: float
) -> float:
    """Seed 001: spot hours plus the hours lost to pre-emptions, re-run at ``rerun_price``."""
    return hours * spot_price_per_hour + rerun_hours * rerun_price_per_hour


def savings_fraction(baseline_usd: float, alternative_usd: float) -> float:
    """1 - alternative / baseline (0.62 means 62 % saved)."""
    if baseline_usd <= 0:
        raise ValueError("baseline cost must be > 0")
    return 1.0 - alternative_usd / baseline_usd


def expected_paid_hours(useful_hours: float, goodput: float) -> float:
    """Paid hours to get ``useful_hours`` of training at ``goodput`` (useful / paid)."""
    if not 0 < goodput <= 1:
        raise ValueError("goodput must be in (0, 1]")
    return useful_hours / goodput


def expected_spot_cost(useful_hours: float, goodput: float, price_per_hour: float) -> float:
    """Seed 001 refined: every paid hour, re-run and checkpoint overhead included, is paid at
    the capacity's own price (the goodput comes from the simulator)."""
    return expected_paid_hours(useful_hours, goodput) * price_per_hour
