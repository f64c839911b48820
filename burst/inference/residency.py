"""Where a request may be served: the legal preflight's decision, transfer kind "inference".

A request carries data of one class from one country, entering at the user's near region. For
each tier region, the same Rego rules the preflight runs (``burst.policy.engine``) judge moving
that data there, with ``spec.transfer = "inference"`` (policies/rules/inference.rego notes the
kind). The router serves a request only in a region whose decision says ``data_may_move``: no
residency or transfer reason blocks it and no unsure residency fact is involved (fail closed).

The table is computed once per (class, origin, entry region) at start-up, so routing stays a
pure function of it (``burst.inference.routing``).
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from burst.policy.engine import Engine, input_document
from burst.policy.loader import PolicySet, load_policies
from burst.policy.record import first_reason
from burst.spec import BurstJob

log = logging.getLogger(__name__)

TRANSFER_KIND = "inference"


@dataclass(frozen=True)
class DataKey:
    """What the law looks at in a request: its data class, the country the data comes from,
    and the region it enters at (the user's near region)."""

    data_class: str
    origin: str
    entry_region: str


@dataclass(frozen=True)
class RegionRuling:
    region: str
    allowed: bool
    verdict: str  # the preflight verdict for that region (allow / review / deny)
    reason: str  # the first blocking reason, or why it is allowed


@dataclass(frozen=True)
class Residency:
    """The preflight's rulings per data key and region. A key or region it has no ruling for
    is not allowed (fail closed)."""

    rulings: Mapping[DataKey, Mapping[str, RegionRuling]] = field(default_factory=dict)

    def ruling(self, key: DataKey, region: str) -> RegionRuling:
        found = self.rulings.get(key, {}).get(region)
        if found is None:
            return RegionRuling(region, False, "deny", "no preflight ruling for this data here")
        return found

    def allowed(self, key: DataKey) -> frozenset[str]:
        return frozenset(r for r, x in self.rulings.get(key, {}).items() if x.allowed)


def _ruling(region: str, decision: Mapping[str, object]) -> RegionRuling:
    allowed = decision.get("data_may_move") is True and decision.get("verdict") != "deny"
    verdict = str(decision.get("verdict"))
    if allowed:
        reason = f"preflight ({TRANSFER_KIND}): data may move to {region} (verdict {verdict})"
    else:
        reason = f"preflight ({TRANSFER_KIND}): {first_reason(dict(decision))}"
    return RegionRuling(region, allowed, verdict, reason)


def inference_residency(
    job: BurstJob,
    keys: Iterable[DataKey],
    regions: Iterable[str],
    provider: str,
    policies: PolicySet | None = None,
    *,
    today: dt.date | None = None,
) -> Residency:
    """Evaluate the preflight rules for every key and region. ``job`` is the trained run's
    spec: the organisation, model and compute the rules read; the data fields are the
    request's."""
    policies = policies or load_policies()
    engine = Engine.shared(policies)
    today = today or dt.datetime.now(dt.UTC).date()
    max_age = policies.settings.max_fact_age_days
    region_list = list(dict.fromkeys(regions))
    out: dict[DataKey, dict[str, RegionRuling]] = {}
    for key in dict.fromkeys(keys):
        data = job.data.model_copy(
            update={
                "classification": key.data_class,
                "origin": key.origin,
                "region": key.entry_region,
                "shards": None,
            }
        )
        request_job = job.model_copy(update={"data": data})
        per_region: dict[str, RegionRuling] = {}
        for region in region_list:
            doc = input_document(
                request_job, region, provider, today=today, max_fact_age_days=max_age
            )
            doc["spec"]["transfer"] = TRANSFER_KIND
            per_region[region] = _ruling(region, engine.evaluate(doc))
            log.info(
                "residency %s/%s via %s -> %s: %s",
                key.data_class,
                key.origin,
                key.entry_region,
                region,
                per_region[region].reason,
            )
        out[key] = per_region
    return Residency(out)
