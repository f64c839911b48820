"""The routing policy, as code: for one request, an ordered plan of what to try.

    cache -> near-user distilled tier -> heavy tier in the GPU region -> queue -> refuse

decided by the request's latency budget, the fidelity it asks for, the tiers' health and queue
depth, the round trip from the region the request enters at to each tier, and the law
(``burst.inference.residency``: a tier outside the regions the preflight allows for the
request's data is never in its plan, not even as a fallback). Pure: the same inputs give the
same plan; nothing here does I/O except logging each decision with its reason.

``run_plan`` is the plan's executor: it tries the steps in order and falls through to the next
step when one fails (a tier killed, slowed past the deadline, its queue full, its region
unreachable), so a fallback is always a step the policy named, never an improvisation.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from burst.inference.residency import DataKey, Residency

log = logging.getLogger(__name__)

Fidelity = Literal["standard", "high"]
TierKind = Literal["distilled", "heavy"]
Action = Literal["cache", "serve", "queue", "refuse"]

# kept free for a fallback besides its expected time (the router's own work, jitter)
FALLBACK_SLACK_MS = 20.0
KIND_ORDER: dict[str, int] = {"distilled": 0, "heavy": 1}
# which tiers may answer a request of each fidelity ("high": only the heavy model's answer)
SERVES: dict[str, frozenset[str]] = {
    "standard": frozenset({"distilled", "heavy"}),
    "high": frozenset({"heavy"}),
}


@dataclass(frozen=True)
class Request:
    id: str
    data: DataKey  # class, origin country, and the region the request enters at
    budget_ms: float  # the user-facing latency budget: answered within it or refused
    fidelity: Fidelity = "standard"
    cache_key: str | None = None


@dataclass(frozen=True)
class TierState:
    """What the router knows of a tier when it plans (health checks, queue gauges)."""

    name: str
    kind: TierKind
    region: str
    service_ms: float  # observed time to answer one request, without queueing or round trip
    healthy: bool = True
    reachable: bool = True  # the region answers at all (a region-wide outage: False)
    queue_depth: int = 0
    queue_limit: int = 8


@dataclass(frozen=True)
class CacheEntry:
    """A cached answer for the request's cache key, stored in ``region`` (where the request
    entered when it was computed) by a tier of ``kind``."""

    region: str
    kind: TierKind
    lookup_ms: float = 1.0


@dataclass(frozen=True)
class Step:
    action: Action
    tier: str | None
    region: str | None
    expected_ms: float  # round trip + queueing + service, as planned
    deadline_ms: float  # give up on this step at this time since the request arrived
    reason: str


@dataclass(frozen=True)
class Skip:
    target: str
    reason: str


@dataclass(frozen=True)
class Plan:
    request: Request
    steps: tuple[Step, ...]
    skipped: tuple[Skip, ...] = ()

    def describe(self) -> str:
        steps = " -> ".join(f"{s.action}:{s.tier or '-'}@{s.region or '-'}" for s in self.steps)
        skips = "; ".join(f"{s.target}: {s.reason}" for s in self.skipped)
        return f"{steps}" + (f" (skipped {skips})" if skips else "")

    def regions(self) -> set[str]:
        """Every region a step of this plan could send the request's data to."""
        return {s.region for s in self.steps if s.region is not None and s.action != "refuse"}


def round_trip_ms(rtt: Mapping[frozenset[str], float], src: str, dst: str) -> float | None:
    """The emulated round trip between two regions (0 inside one region); None: unknown."""
    if src == dst:
        return 0.0
    return rtt.get(frozenset((src, dst)))


def _tier_order(
    tiers: Sequence[TierState], rtt: Mapping[frozenset[str], float], entry: str
) -> list[TierState]:
    def key(t: TierState) -> tuple[int, float, str]:
        r = round_trip_ms(rtt, entry, t.region)
        return (KIND_ORDER[t.kind], r if r is not None else float("inf"), t.name)

    return sorted(tiers, key=key)


def plan_request(
    request: Request,
    tiers: Sequence[TierState],
    residency: Residency,
    rtt: Mapping[frozenset[str], float],
    cached: CacheEntry | None = None,
    *,
    log_decision: bool = True,
) -> Plan:
    """The ordered plan for ``request``; the last step is always ``refuse``. The decision is
    logged with its reasons (``log_decision=False``: a what-if plan, not a routing decision)."""
    budget = request.budget_ms
    entry = request.data.entry_region
    allowed = residency.allowed(request.data)
    eligible_kinds = SERVES[request.fidelity]
    steps: list[Step] = []
    skipped: list[Skip] = []

    if cached is not None:
        if cached.region not in allowed:
            skipped.append(Skip("cache", f"cached in {cached.region}, not allowed for this data"))
        elif cached.kind not in eligible_kinds:
            skipped.append(
                Skip("cache", f"cached answer is {cached.kind}, {request.fidelity} fidelity asked")
            )
        else:
            lookup = cached.lookup_ms + (round_trip_ms(rtt, entry, cached.region) or 0.0)
            steps.append(Step("cache", None, cached.region, lookup, budget, "cached answer"))

    queue_target: tuple[TierState, float] | None = None
    for t in _tier_order(tiers, rtt, entry):
        if t.kind not in eligible_kinds:
            skipped.append(Skip(t.name, f"{t.kind} tier does not give {request.fidelity} fidelity"))
            continue
        if t.region not in allowed:
            why = residency.ruling(request.data, t.region).reason
            skipped.append(
                Skip(
                    t.name,
                    f"{t.region} not allowed for {request.data.data_class} data "
                    f"from {request.data.origin}: {why}",
                )
            )
            continue
        r = round_trip_ms(rtt, entry, t.region)
        if r is None:
            skipped.append(Skip(t.name, f"no link known from {entry} to {t.region} (fail closed)"))
            continue
        if not t.reachable:
            skipped.append(Skip(t.name, f"region {t.region} unreachable"))
            continue
        alone = r + t.service_ms
        if alone > budget:
            skipped.append(
                Skip(t.name, f"round trip + service {alone:.0f} ms > budget {budget:.0f} ms")
            )
            continue
        if queue_target is None:
            queue_target = (t, alone)
        if not t.healthy:
            skipped.append(Skip(t.name, "unhealthy"))
            continue
        if t.queue_depth >= t.queue_limit:
            skipped.append(Skip(t.name, f"queue full ({t.queue_depth}/{t.queue_limit})"))
            continue
        expected = r + (t.queue_depth + 1) * t.service_ms
        if expected > budget:
            skipped.append(
                Skip(
                    t.name,
                    f"expected {expected:.0f} ms with queue {t.queue_depth} "
                    f"> budget {budget:.0f} ms",
                )
            )
            continue
        steps.append(
            Step(
                "serve",
                t.name,
                t.region,
                expected,
                budget,
                f"{t.kind} tier, expected {expected:.0f} ms",
            )
        )

    if queue_target is not None:
        t, alone = queue_target
        steps.append(
            Step(
                "queue",
                t.name,
                t.region,
                alone,
                budget,
                f"wait for {t.name} while {alone:.0f} ms still fit the {budget:.0f} ms budget",
            )
        )
    else:
        skipped.append(Skip("queue", "no lawful tier can answer within the budget"))
    steps = _leave_room(steps, budget, {t.name: t for t in tiers})
    refusal = (
        "no step answered within the budget"
        if steps
        else "no lawful tier can answer within the budget"
    )
    steps.append(Step("refuse", None, None, 0.0, budget, refusal))
    plan = Plan(request, tuple(steps), tuple(skipped))
    if log_decision:
        log.info("route %s: %s", request.id, plan.describe())
    return plan


def _leave_room(steps: list[Step], budget: float, tiers: Mapping[str, TierState]) -> list[Step]:
    """Give each step a deadline that leaves its fallback's time in the budget, so a tier
    slowed past it is abandoned while the fallback still fits. The fallback is the next step on
    a tier no earlier step used (waiting again for a tier that just failed is no reason to cut
    a working step short); its time is its expected time, plus one service time for each
    request queued on the failing tier (when a tier fails, those fail over with this one), plus
    ``FALLBACK_SLACK_MS``. Where both cannot fit, the step keeps the whole budget: its fallback
    could not have answered in time anyway."""
    out: list[Step] = []
    seen: set[str | None] = set()
    for i, step in enumerate(steps):
        seen.add(step.tier)
        fresh = [s for s in steps[i + 1 :] if s.action != "refuse" and s.tier not in seen]
        room = budget
        if fresh:
            fallback = fresh[0]
            here = tiers.get(step.tier or "")
            there = tiers.get(fallback.tier or "")
            crowd = here.queue_depth if here is not None else 0
            extra = crowd * there.service_ms if there is not None else 0.0
            room = budget - fallback.expected_ms - extra - FALLBACK_SLACK_MS
        out.append(replace(step, deadline_ms=room if room >= step.expected_ms else budget))
    return out


@dataclass(frozen=True)
class Outcome:
    ok: bool
    detail: str = ""


@dataclass(frozen=True)
class Routed:
    """What became of a request: the step that answered (``refuse`` when none did) and every
    step tried, with its outcome."""

    request: Request
    served_by: Step
    trail: tuple[tuple[Step, Outcome], ...] = field(default_factory=tuple)

    @property
    def refused(self) -> bool:
        return self.served_by.action == "refuse"


def run_plan(plan: Plan, attempt: Callable[[Step], Outcome]) -> Routed:
    """Try the plan's steps in order; the first that answers serves the request. ``attempt``
    performs one step (a cache lookup, a call to a tier, a wait in the queue) and reports
    whether it answered in time. ``refuse`` is never attempted: it is the answer."""
    trail: list[tuple[Step, Outcome]] = []
    for step in plan.steps:
        if step.action == "refuse":
            break
        outcome = attempt(step)
        trail.append((step, outcome))
        log.info(
            "route %s: %s %s -> %s%s",
            plan.request.id,
            step.action,
            step.tier or "-",
            "ok" if outcome.ok else "failed",
            f" ({outcome.detail})" if outcome.detail else "",
        )
        if outcome.ok:
            return Routed(plan.request, step, tuple(trail))
    refuse = plan.steps[-1]
    log.info("route %s: refused (%s)", plan.request.id, refuse.reason)
    return Routed(plan.request, refuse, tuple(trail))
