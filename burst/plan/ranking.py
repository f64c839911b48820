"""Ranking: the priced candidates in the order provision tries them, and the budget and
deadline cut.

Lexicographic (``objective="cost"``, the default):
1. preflight verdict: ``allow`` before ``review`` / ``unchecked`` (no decision record given);
2. candidates whose price is in the catalog before those priced by the conservative rule;
3. known availability before unknown;
4. expected cost, then expected hours (``objective="time"`` swaps these two);
5. the spec's order: ``compute.regions`` is the candidate set, and among candidates equal on
   all of the above the region listed first (then the provider listed first) ranks first.

Candidates over the budget or past the deadline are dropped (provision must never fail over
into them) and listed under ``excluded``; if nothing is left, ``PolicyRefusal`` (exit 3) with
the numbers.
"""

from __future__ import annotations

from typing import Any

from burst.errors import PolicyRefusal
from burst.plan.eligibility import Exclusions
from burst.spec import BurstJob

VERDICT_RANK = {"allow": 0, "review": 1, "unchecked": 1}
OBJECTIVES = ("cost", "time")


def rank_key(objective: str, job: BurstJob | None = None) -> Any:
    regions = list(job.compute.regions) if job is not None else []
    providers = list(job.compute.providers) if job is not None else []

    def order(items: list[str], name: str) -> int:
        return items.index(name) if name in items else len(items)

    def key(c: dict[str, Any]) -> tuple[Any, ...]:
        main = (
            (c["expected_cost_usd"], c["expected_hours"])
            if objective == "cost"
            else (c["expected_hours"], c["expected_cost_usd"])
        )
        return (
            VERDICT_RANK[c["verdict"]],
            c["price_basis"] == "unknown",
            c["availability"] != "available",
            *main,
            order(regions, c["region"]),
            order(providers, c["provider"]),
        )

    return key


def rank(
    job: BurstJob, priced: list[dict[str, Any]], objective: str, excluded: Exclusions
) -> list[dict[str, Any]]:
    """The candidates within budget and deadline, best first, numbered from 1; the rest go to
    ``excluded``. ``PolicyRefusal`` when none is left."""
    ordered = sorted(priced, key=rank_key(objective, job))
    candidates = []
    for c in ordered:
        if not c["within_budget"]:
            excluded.add(
                c["provider"],
                c["region"],
                c["capacity"],
                f"expected cost ${c['expected_cost_usd']:,.2f} exceeds the budget "
                f"${job.budget.max_usd:,.2f}",
                expected_cost_usd=c["expected_cost_usd"],
            )
        elif not c["within_deadline"]:
            excluded.add(
                c["provider"],
                c["region"],
                c["capacity"],
                f"expected {c['expected_hours']:.2f} h exceeds the deadline "
                f"{job.budget.max_hours:g} h",
                expected_hours=c["expected_hours"],
            )
        else:
            candidates.append(c)
    if not candidates:
        raise PolicyRefusal(refusal(job, ordered, excluded.items))
    for i, c in enumerate(candidates, 1):
        c["rank"] = i
    return candidates


def refusal(job: BurstJob, priced: list[dict[str, Any]], excluded: list[dict[str, Any]]) -> str:
    """Why nothing can run, with the numbers."""
    if priced:
        best = min(priced, key=lambda c: c["expected_cost_usd"])
        where = f"{best['provider']}/{best['region']} {best['capacity']}"
        if not best["within_budget"]:
            return (
                f"refused before renting anything: best expected cost "
                f"${best['expected_cost_usd']:,.2f} ({where}, {best['expected_hours']:.2f} h"
                f" at ${best['price_per_hour']:,.2f}/h) exceeds the budget "
                f"${job.budget.max_usd:,.2f} (budget.max_usd)"
            )
        fastest = min(priced, key=lambda c: c["expected_hours"])
        return (
            f"refused before renting anything: best expected time "
            f"{fastest['expected_hours']:.2f} h ({fastest['provider']}/{fastest['region']} "
            f"{fastest['capacity']}) exceeds the deadline {job.budget.max_hours:g} h "
            "(budget.max_hours)"
        )
    # one reason once, with every candidate it applies to (not "no price known" four times)
    by_reason: dict[str, list[str]] = {}
    for e in excluded:
        where = f"{e['provider']}/{e['region']}"
        names = by_reason.setdefault(e["reason"], [])
        if where not in names:
            names.append(where)
    reasons = "; ".join(f"{', '.join(where)}: {reason}" for reason, where in by_reason.items())
    return f"no candidate can run this job: {reasons or 'no regions or providers given'}"
