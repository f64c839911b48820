"""preflight: legal checks per candidate (region, provider) -> decision record.

The document this step writes IS the decision record (``burst.documents.DecisionRecord``,
see burst/policy/record.py): spec and policy hashes, time, and per candidate a verdict with
reasons. Policies come from $BURST_POLICIES, else the repository's policies/. When no
candidate is allowed the record is still written (the run report shows why) and the step
exits 3; so it does for a ``regional-sync`` spec unless every one of its regions is allowed
(each trains on its own shard there, and its model updates cross to the aggregation region),
before any region is provisioned.

Before the legal checks, what can be checked before renting is (``ready_before_renting``):
where train runs in this same environment, its packages and its ``training.command`` too.
"""

from __future__ import annotations

import importlib.util
import sys

from burst.documents import DecisionRecord
from burst.errors import PolicyRefusal
from burst.installed import check as check_installed
from burst.installed import trains_here
from burst.policy import evaluate, first_reason, load_policies
from burst.readiness import check_entrypoint, check_stores
from burst.settings import current
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> DecisionRecord:
    ready_before_renting(ctx)
    record = evaluate(ctx.spec, load_policies())
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
        refusal.doc = record  # stepio writes it
        raise refusal
    if ctx.spec.training.strategy == "regional-sync":
        every_region_allowed(ctx, record)
    return record


def every_region_allowed(ctx: StepContext, record: DecisionRecord) -> None:
    """A regional-sync run needs each of its regions: refuse (exit 3, the record written)
    naming the first one the record does not allow for this spec."""
    from burst.documents.plan import Candidate
    from burst.infra.provision import gate_candidates
    from burst.regional.runtime import regional

    job = ctx.spec
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    wanted = [Candidate(provider=provider, region=r) for r in regional(job).regions or []]
    _, refused = gate_candidates(record, job, wanted)
    if refused:
        first = refused[0]
        refusal = PolicyRefusal(
            f"region {first.region} is not allowed for this spec: {first.reason} "
            "(the decision record lists every reason); nothing was provisioned"
        )
        refusal.doc = record  # stepio writes it
        raise refusal


def ready_before_renting(ctx: StepContext) -> None:
    """Check before renting (burst.readiness, burst.installed). Where the train step runs in
    this same environment (``burst run``: every step a process of this machine's Python),
    the packages the spec's engine and mode import are installed (one line naming the extra
    to install) and a ``training.command`` is found and starts. Then the checkpoint stores
    accept a write, and, on a rented target where this image has torch, the entrypoint
    builds. A failure here is exit 2 or 4 and nothing is provisioned. In a container run or
    on a cluster this step runs in the steps image, not where train runs: verify-image
    checks the trainer image's declared torch and DeepSpeed (``burst.installed`` says why).
    (``burst run`` rents nothing: its train step builds the entrypoint; ``burst validate``
    checks it before any run.)"""
    job = ctx.spec
    here = trains_here()
    if here:
        check_installed(job)
    check_stores(job)
    if current().target != "local" and importlib.util.find_spec("torch") is not None:
        check_entrypoint(job)  # (a training.command: found and starts)
    elif here and job.training.own_program:
        check_entrypoint(job)  # the command only: found and starts, no torch needed


if __name__ == "__main__":
    sys.exit(main("preflight", run))
