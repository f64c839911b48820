"""preflight: legal checks per candidate (region, provider) -> decision record.

The document this step writes IS the decision record (``burst.documents.DecisionRecord``,
see burst/policy/record.py): spec and policy hashes, time, and per candidate a verdict with
reasons. Policies come from $BURST_POLICIES, else the repository's policies/. When no
candidate is allowed the record is still written (the run report shows why) and the step
exits 3.
"""

from __future__ import annotations

import sys

from burst.documents import DecisionRecord, produce
from burst.errors import PolicyRefusal
from burst.policy import evaluate, first_reason, load_policies
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> DecisionRecord:
    record = produce(DecisionRecord, evaluate(ctx.spec, load_policies()))
    if not record.allowed:
        first = record.decisions[0] if record.decisions else None
        counts = record.counts
        refusal = PolicyRefusal(
            f"no candidate is allowed ({counts.deny if counts else 0} denied, "
            f"{counts.review if counts else 0} to review); first: "
            + (
                f"{first.provider}/{first.region} {first_reason(first)}"
                if first
                else "no candidates"
            )
            + "; the decision record lists every reason"
        )
        refusal.doc = record  # type: ignore[attr-defined]  # stepio writes it
        raise refusal
    return record


if __name__ == "__main__":
    sys.exit(main("preflight", run))
