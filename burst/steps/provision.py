"""provision: apply the run's Terraform stack in the plan's first candidate, failing over.

Refuses (exit 3) unless the preflight decision record (``--input decision=...``) allows the
candidate for exactly this spec and the policies as they are now; only allowed candidates
are attempted. On a cluster, refuses (exit 3) a placement no Kueue flavor of the team's
ClusterQueue covers, before anything is rented (``burst.admission.kueue_reader``;
docs/queue.md); an API server it cannot read fails the step (exit 4). Then, quota first:
the run's Kueue Workload waits in its team's LocalQueue until Kueue admits it
(``burst.admission.kueue_workload``), before any Terraform apply; longer than
``BURST_KUEUE_WAIT_S`` is exit 75 (requeue). Provision then rents only under the admitted flavor.

Fault injection: ``BURST_FAIL_AT=provision`` fails before anything is applied;
``provision:midway`` fails at apply time after part of the stack exists (teardown destroys
it); ``BURST_SIMULATE_NO_CAPACITY=region,...`` makes those regions report no capacity.

Recovery (``burst.recovery``, spec ``compute.recovery``): the pipeline places train again
after it was lost (``BURST_RECOVERY_EVENT=requeue``) or killed (``restart``), giving the
previous placement's document as ``--input previous=...``; the run's strategy orders the
candidates, and this document's ``recovery`` section says what the next loss may do. What an
earlier placement left in another region is destroyed first.

A region's branch of ``burst-regional`` (a ``regional-sync`` spec) is this step placed in one
region: it runs with ``BURST_REGION`` and ``--run-id <workflow>-<region>`` (the region's stack
id, from which the exit handler's teardown destroys it alone); the candidates are the plan's in
that region (``burst.plan.regional.region_candidates``), through the same gates, and the
ledger admits the region's share of ``budget.max_usd`` (``region_share``) without queueing (a
region waiting for room while another region's stack is rented would pay for that one idle:
exit 3 when the team has no room now).
"""

from __future__ import annotations

import logging
import sys

from burst.admission.admit import admit
from burst.admission.dispatch import dispatch_run
from burst.admission.identity import check_workflow_identity
from burst.admission.kueue_reader import kueue_gate, read_kueue
from burst.admission.kueue_workload import reserve_quota
from burst.admission.ledger import ledger_url
from burst.admission.steps import admit_run, run_ledger
from burst.documents import DecisionRecord, PlanDocument, ProvisionDocument
from burst.documents.plan import Candidate
from burst.documents.provision import Admission, DecisionHashes, ProvisionAttempt
from burst.errors import BurstError, InfraError
from burst.infra.provision import gate_candidates, provision
from burst.obs.metrics import RunMetrics, exported
from burst.recovery import REQUEUE, strategy_for
from burst.settings import current
from burst.stepio import StepContext, main

log = logging.getLogger(__name__)

#: A region's workspace (``<workflow>-<region>/``) names its region in this file: part of
#: its run, not a run of its own (``burst runs``).
REGION_MARKER = "region"

OUTCOMES = {"ok": "ok", "capacity": "no_capacity", "error": "error", "injected": "error"}


def _record(metrics: RunMetrics, attempts: list[ProvisionAttempt]) -> None:
    for a in attempts:
        metrics.record_provision_attempt(a.region, OUTCOMES[a.result])


def _candidates(ctx: StepContext) -> tuple[list[Candidate], str | None]:
    """The candidates to place, and the branch's region (None: the run is not regional)."""
    if ctx.spec.training.strategy != "regional-sync":
        return list(ctx.input("plan", PlanDocument).candidates), None
    from burst.plan.regional import branch_region, region_candidates

    region = branch_region(ctx.spec)  # (bad input first, the legal gate next)
    (ctx.paths.dir / REGION_MARKER).write_text(region + "\n")
    return region_candidates(ctx.spec, region, ctx.optional_input("plan", PlanDocument)), region


def last_source(ctx: StepContext) -> str | None:
    """What ended the run's last train attempt (its ``recovery_source``, from the attempt
    records in the run's store): a requeue after a move back to spot puts spot first
    (``burst.recovery``). Records that cannot be read leave the usual requeue order."""
    from burst.attempt_records import read_store, source
    from burst.storage import open_store
    from burst.storage.location import run_url

    try:
        records = read_store(open_store(run_url(ctx.spec.storage.checkpoint_uri, ctx.run_id)))
    except (BurstError, OSError) as exc:
        log.warning("cannot read the attempt records (the usual requeue order): %s", exc)
        return None
    return source(records[-1]) if records else None


def _release_rental(ctx: StepContext) -> None:
    """A requeued run that waits in Kueue's queue holds no rental: destroy what an earlier
    placement left (teardown's destroy, found from the run id) before it waits."""
    from burst.infra.teardown import destroy_run

    log.info("queued again: destroying the earlier placement's rental while the run waits")
    gone = destroy_run(ctx.paths.terraform)
    if gone.resources_remaining:
        raise InfraError(
            f"{gone.resources_remaining} resource(s) of the earlier placement remain after "
            "its destroy; not waiting in the queue while they bill",
            where=ctx.run_id,
        )


def run(ctx: StepContext) -> ProvisionDocument:
    candidates, region = _candidates(ctx)
    decision = ctx.optional_input("decision", DecisionRecord)
    previous = ctx.optional_input("previous", ProvisionDocument)
    allowed, refused = gate_candidates(decision, ctx.spec, candidates)
    ctx.input("plan", PlanDocument)  # (a region's branch: after the legal gate)
    strategy = strategy_for(ctx.spec)
    event = current().recovery_event
    placement = strategy.place(
        allowed,
        previous.recovery if previous else None,
        event,
        last_source=last_source(ctx) if event == REQUEUE else None,
    )
    ctx.fail_point("before")
    check_workflow_identity(ctx.spec)  # the quota and queue it would use are the spec's
    # admission, before anything is rented: on a cluster, only candidates a Kueue flavor of
    # the team's ClusterQueue covers (none: exit 3; API server unreadable: exit 4); then the
    # ledger reserves the planned cost (exit 3 if over)
    # (the team's Kueue queue is read once, here, for the gate, dispatch and the quota wait)
    kueue = read_kueue(ctx.spec)
    gated = kueue_gate(ctx.spec, placement.candidates, kueue)
    candidates = dispatch_run(ctx, gated, refused, previous, lambda: last_source(ctx), kueue)

    def redispatch(waited_s: float) -> list[Candidate]:
        # asked again while the run waits: the queues as Kueue holds them now (unreadable
        # this time: the run stays where it waits, whose own look fails closed)
        try:
            now = read_kueue(ctx.spec)
        except InfraError as exc:
            log.warning("dispatch not asked again: %s", exc.one_line())
            return []
        return dispatch_run(
            ctx, gated, refused, previous, lambda: last_source(ctx), now,
            waited_s=waited_s, room_only=True,
        )  # fmt: skip

    # quota first, then rent: on a cluster with Kueue, the run's Workload waits in its team's
    # queue until admitted (exit 75 past BURST_KUEUE_WAIT_S); an earlier placement's rental
    # is released while it waits
    candidates = reserve_quota(
        ctx.spec,
        ctx.run_id,
        candidates,
        current().kueue_wait_s,
        kueue,
        on_queued=(lambda: _release_rental(ctx)) if previous is not None else None,
        poll_s=current().kueue_poll_s,
        redispatch=redispatch,
        redispatch_s=current().kueue_redispatch_s,
    )
    if region is None:
        entry = admit_run(ctx.spec, ctx.run_id, ctx.paths.root, candidates)
    else:  # the region's share, under its stack id, refused (not queued) when over
        from burst.plan.regional import region_share

        share = region_share(ctx.spec)
        entry = admit(run_ledger(ctx.paths.root), share, ctx.run_id, candidates)
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
