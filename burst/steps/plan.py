"""plan: rank candidates (region, provider, capacity) by expected cost and time.

Reads the spec, the preflight decision record (``--input decision=...``, optional: without it
every candidate is "unchecked") and the catalog (default plus ``$BURST_CATALOG`` files).
Writes the plan document (docs/planning.md); exit 3 when the best expected cost exceeds the
budget (or nothing fits the deadline, or every candidate is denied) or the decision record is
for another spec (its spec_sha256 is not this spec's); exit 2 when it has no spec_sha256.
"""

from __future__ import annotations

import sys

from burst.documents import DecisionRecord, PlanDocument, produce
from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> PlanDocument:
    decision = ctx.optional_input("decision", DecisionRecord)
    return produce(PlanDocument, plan(ctx.spec, load_catalog(), decision))


if __name__ == "__main__":
    sys.exit(main("plan", run))
