"""teardown: destroy the run's infrastructure, found from the run id alone, then prove nothing
is left (leak scan), and settle the run's reservation in its team's ledger to what it used.
It never reads provision's outputs: it must work whatever failed before. A region's branch
confirms the checkpoint and settles from its worker's store in the region, named by the stack's
``checkpoint_uri`` output in the Terraform state (on one machine, by the region's site). On a
cluster with Kueue it deletes the run's Workload (its quota, burst.admission.kueue_workload),
also when the destroy failed; a missing one is fine.

Exit 4 (LeakError) when anything remains, naming it. ``--fail-at teardown`` (BURST_FAIL_AT)
fails the first two destroy attempts, which the retries must survive.
"""

from __future__ import annotations

import functools
import logging
import sys

from burst.admission.steps import settle_run
from burst.documents import TeardownDocument
from burst.documents.teardown import CheckpointSync, Leak, settlement_of
from burst.errors import BurstError, LeakError
from burst.infra.ckptsync import confirm_checkpoint_sync
from burst.infra.teardown import destroy_run, leak_scan
from burst.obs.metrics import RunMetrics, export_from_env
from burst.stepio import StepContext, main
from burst.storage.base import ObjectStore, StoreOpener

log = logging.getLogger(__name__)

INJECTED_ATTEMPTS = (1, 2)


def _train_store(ctx: StepContext) -> StoreOpener | None:
    """Where a region's branch kept its checkpoints and attempt records: its worker's store
    in the region (``burst.plan.regional.worker_store``), from the stack's ``checkpoint_uri``
    output, read before the destroy (on one machine: the region's site). None: the spec's
    store under the run id, as for every other run."""
    if ctx.spec.training.strategy != "regional-sync":
        return None

    @functools.cache
    def opened() -> ObjectStore:
        from burst.plan.regional import worker_store
        from burst.regional.site import given_site

        uri = None
        if given_site() is None:
            from burst.infra import runrecord
            from burst.infra.workspace import terraform_for_run

            runrecord.fetch(ctx.paths.terraform)
            got = terraform_for_run(ctx.paths.terraform)
            out = got[0].outputs().get("checkpoint_uri") if got else None
            uri = out if isinstance(out, str) else None
        return worker_store(ctx.spec, ctx.run_id, uri)

    return opened


def _release_quota(run_id: str) -> None:
    """Delete the run's Kueue Workload (burst.admission.kueue_workload); a missing one is
    fine. An API server that cannot be read fails the step (exit 4), which is retried."""
    from burst.admission.kueue_workload import release_quota

    release_quota(run_id)


def run(ctx: StepContext) -> TeardownDocument:
    injected: list[int] = []

    def before_attempt(attempt: int) -> None:
        if attempt in INJECTED_ATTEMPTS:
            try:
                ctx.fail_point()
            except Exception:
                injected.append(attempt)
                raise

    # the last checkpoint must reach the store before the nodes that upload it go
    train_store = _train_store(ctx)
    sync = CheckpointSync.model_validate(
        confirm_checkpoint_sync(ctx.spec, ctx.run_id, store_of=train_store)
    )
    try:
        destroyed = destroy_run(ctx.paths.terraform, before_attempt=before_attempt)
    except BurstError:
        try:  # the quota goes whatever failed (the retry destroys); the destroy's error first
            _release_quota(ctx.run_id)
        except BurstError as also:
            log.error("the run's Kueue Workload was not deleted either: %s", also.one_line())
        raise
    _release_quota(ctx.run_id)  # on a cluster with Kueue: the run's Workload, its quota
    leaks = [Leak.model_validate(x) for x in leak_scan(ctx.run_id, ctx.paths.terraform)]
    # the ledger: what was used
    settled = settle_run(ctx.spec, ctx.run_id, ctx.paths.root, store=train_store)
    doc = TeardownDocument(
        **destroyed.model_dump(exclude_unset=True),
        checkpoint_sync=sync,
        injected_failures=injected,
        leaks=leaks,
    )
    if settled is not None:
        doc.settlement = settlement_of(settled)
    metrics = RunMetrics.for_job(ctx.run_id, ctx.spec)
    metrics.set_leaked(len(leaks))
    export_from_env(metrics, ctx.paths.dir, "teardown")
    if leaks:
        names = ", ".join(f"{x.kind} {x.id}" for x in leaks)
        err = LeakError(f"{len(leaks)} resource(s) of run {ctx.run_id} remain: {names}")
        err.doc = doc
        raise err
    return doc


if __name__ == "__main__":
    sys.exit(main("teardown", run, step_fail_point=False))
