"""provision: apply the run's Terraform stack in the plan's first candidate, failing over.

Refuses (exit 3) unless the preflight decision record (``--input decision=...``) allows the
candidate for exactly this spec and the policies as they are now; only allowed candidates
are attempted. On a cluster, refuses (exit 3) a placement no Kueue flavor of the team's
ClusterQueue covers, before anything is rented (``burst.admission.kueue_reader``;
docs/queue.md); an API server it cannot read fails the step (exit 4).

Fault injection: ``BURST_FAIL_AT=provision`` fails before anything is applied;
``provision:midway`` fails at apply time after part of the stack exists (teardown destroys
it); ``BURST_SIMULATE_NO_CAPACITY=region,...`` makes those regions report no capacity.

Recovery (``burst.recovery``, spec ``compute.recovery``): the pipeline places train again
after it was lost (``BURST_RECOVERY_EVENT=requeue``) or killed (``restart``), giving the
previous placement's document as ``--input previous=...``; the run's strategy orders the
candidates, and this document's ``recovery`` section says what the next loss may do. What an
earlier placement left in another region is destroyed first.
"""

from __future__ import annotations

import sys

from burst.admission.kueue_reader import kueue_gate
from burst.admission.ledger import ledger_url
from burst.admission.steps import admit_run
from burst.documents import DecisionRecord, PlanDocument, ProvisionDocument
from burst.documents.provision import Admission, DecisionHashes, ProvisionAttempt
from burst.errors import BurstError, InfraError
from burst.infra.provision import gate_candidates, provision
from burst.obs.metrics import RunMetrics, exported
from burst.recovery import strategy_for
from burst.settings import current
from burst.stepio import StepContext, main

OUTCOMES = {"ok": "ok", "capacity": "no_capacity", "error": "error", "injected": "error"}


def _record(metrics: RunMetrics, attempts: list[ProvisionAttempt]) -> None:
    for a in attempts:
        metrics.record_provision_attempt(a.region, OUTCOMES[a.result])


def run(ctx: StepContext) -> ProvisionDocument:
    plan = ctx.input("plan", PlanDocument)
    decision = ctx.optional_input("decision", DecisionRecord)
    previous = ctx.optional_input("previous", ProvisionDocument)
    allowed, refused = gate_candidates(decision, ctx.spec, plan.candidates)
    strategy = strategy_for(ctx.spec)
    placement = strategy.place(
        allowed, previous.recovery if previous else None, current().recovery_event
    )
    ctx.fail_point("before")
    # admission, before anything is rented: on a cluster, only candidates a Kueue flavor of
    # the team's ClusterQueue covers (none: exit 3; API server unreadable: exit 4); then the
    # ledger reserves the planned cost (exit 3 if over)
    candidates = kueue_gate(ctx.spec, placement.candidates)
    entry = admit_run(ctx.spec, ctx.run_id, ctx.paths.root, candidates)
    with exported(RunMetrics.for_job(ctx.run_id, ctx.spec), ctx.paths.dir, "provision") as m:
        try:
            doc = provision(
                ctx.spec,
                ctx.run_id,
                ctx.paths.terraform,
                candidates,
                policy=strategy,
            )
        except BurstError as exc:
            failed = getattr(exc, "doc", None)
            if isinstance(failed, ProvisionDocument):
                _record(m, failed.attempts)
                exc.doc = failed.model_copy(
                    update={"refused": refused, "recovery": placement.record}
                )
            raise
        _record(m, doc.attempts)
    if doc.candidate is None:  # provision() returns only once a candidate is applied
        raise InfraError("provision returned no candidate", where=ctx.run_id)
    return doc.model_copy(
        update={
            "refused": refused,
            "placement": len(placement.record.history),
            "admission": Admission.from_entry(entry, ledger_url(ctx.paths.root)),
            "recovery": strategy.placed(placement, doc.candidate, allowed),
            "decision": DecisionHashes(
                spec_sha256=decision.spec_sha256 if decision else None,
                policy_sha256=decision.policy_sha256 if decision else None,
            ),
        }
    )


if __name__ == "__main__":
    sys.exit(main("provision", run))
