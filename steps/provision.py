"""provision: apply the run's Terraform stack in the plan's first candidate, failing over.

Refuses (exit 3) unless the preflight decision record (``--input decision=...``) allows the
candidate for exactly this spec and the policies as they are now; only allowed candidates
are attempted.

Fault injection: ``BURST_FAIL_AT=provision`` fails before anything is applied;
``provision:midway`` fails at apply time after part of the stack exists (teardown destroys
it); ``BURST_SIMULATE_NO_CAPACITY=region,...`` makes those regions report no capacity.

Requeue: the pipeline places train again in the plan's next candidate after too many
preemptions in one region; ``BURST_CANDIDATE_INDEX=N`` (the placement) skips the first N
allowed candidates, and what an earlier placement left in another region is destroyed first.
"""

from __future__ import annotations

import sys
from typing import Any

from burst.documents import DecisionRecord, PlanDocument, ProvisionDocument, produce
from burst.errors import BurstError, CapacityError
from burst.infra.provision import gate_candidates, provision
from burst.obs.metrics import RunMetrics, exported
from burst.settings import current
from burst.stepio import StepContext, main

OUTCOMES = {"ok": "ok", "capacity": "no_capacity", "error": "error", "injected": "error"}


def _record(metrics: RunMetrics, attempts: list[dict[str, Any]]) -> None:
    for a in attempts:
        metrics.record_provision_attempt(a["region"], OUTCOMES[a["result"]])


def candidate_index() -> int:
    return current().candidate_index


def run(ctx: StepContext) -> ProvisionDocument:
    plan = ctx.input("plan", PlanDocument)
    decision = ctx.optional_input("decision", DecisionRecord)
    candidates = [c.model_dump(mode="json", exclude_unset=True) for c in plan.candidates]
    allowed, refused = gate_candidates(decision, ctx.spec, candidates)
    index = candidate_index()
    if index:
        if index >= len(allowed):
            raise CapacityError(
                f"requeue: no candidate left after {index} placement(s) "
                f"({len(allowed)} allowed candidate(s) in the plan)"
            )
        allowed = allowed[index:]
    ctx.fail_point("before")
    with exported(RunMetrics.for_job(ctx.run_id, ctx.spec), ctx.paths.dir, "provision") as m:
        try:
            doc = provision(
                ctx.spec,
                ctx.run_id,
                ctx.paths.terraform,
                allowed,
            )
        except BurstError as exc:
            failed = getattr(exc, "doc", None)
            if isinstance(failed, dict):
                _record(m, failed.get("attempts", []))
                failed["refused"] = refused
            raise
        _record(m, doc["attempts"])
    doc["refused"] = refused
    doc["placement"] = index
    doc["decision"] = {
        "spec_sha256": decision.spec_sha256 if decision else None,
        "policy_sha256": decision.policy_sha256 if decision else None,
    }
    return produce(ProvisionDocument, doc)


if __name__ == "__main__":
    sys.exit(main("provision", run))
