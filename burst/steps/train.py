"""train: run the training loop on the provisioned node group; resume from the latest full
checkpoint; exit 0 when done, 75 when preempted (requeue) after saving what fitted.

In a region's branch of ``burst-regional`` (a ``regional-sync`` spec, ``BURST_REGION``, the
region's stack id as ``--run-id``) it is that region's worker: the same loop with the regional
sync hook (``burst.train.regional``), configured from the spec, the plan and the region's
stack outputs (``burst.plan.regional.role_config``); 4 when a store or the aggregator does
not answer in time, 3 while another live worker holds the region's trainer lease."""

from __future__ import annotations

from burst.preempt.signals import watch_from_start

if __name__ == "__main__":  # first of all: a notice while the step starts is kept, not a kill
    watch_from_start()

import os

from burst.documents import PlanDocument, ProvisionDocument, TrainDocument, produce
from burst.errors import BadInputError
from burst.spec import BurstJob
from burst.stepio import StepContext, main


def resolve_watchers(infra: ProvisionDocument | None) -> None:
    """``BURST_PREEMPT_WATCHERS=provider`` (what the pipeline sets) means the metadata
    watcher of the provider the node group was provisioned with (none for one without a
    metadata notice, e.g. oci)."""
    from burst.preempt.metadata import WATCHERS
    from burst.settings import current, export

    env = current()
    if env.preempt_watchers.lower() != "provider":
        return
    if env.tf_stack == "local":  # an emulated node group:
        export("BURST_PREEMPT_WATCHERS", "none")  # no metadata service to ask
        return
    candidate = infra.candidate if infra is not None else None
    provider = (candidate.provider if candidate is not None else "").lower()
    export("BURST_PREEMPT_WATCHERS", provider if provider in WATCHERS else "none")


def run(ctx: StepContext) -> TrainDocument:
    ctx.fail_point("before")
    plan = ctx.optional_input("plan", PlanDocument)
    infra = ctx.optional_input("infra", ProvisionDocument)
    resolve_watchers(infra)
    if ctx.spec.training.strategy == "regional-sync":
        return regional_worker(ctx, plan, infra)
    from burst.train.launch import launch, wanted  # (no torch in this process)

    if wanted(ctx.spec, dict(os.environ)):
        # the ranks run this module again, under torchrun
        return produce(TrainDocument, launch(ctx, ctx.spec))
    from burst.program.supervise import supervise  # training.command's mode of the loop
    from burst.train.loop import train

    try:
        return train(ctx.spec, ctx.run_id, ctx.paths.dir, plan, infra, supervise)
    except OSError as exc:
        bad = missing_program(ctx.spec, exc)
        if bad is None:
            raise
        raise bad from None


def regional_worker(
    ctx: StepContext, plan: PlanDocument | None, infra: ProvisionDocument | None
) -> TrainDocument:
    """The branch's region's worker: its role config beside the step's documents
    (``worker.config.json`` in the region's workspace), then the loop with the sync hook."""
    from burst.plan.regional import role_config
    from burst.train.regional import run_worker

    uri = infra.outputs.get("checkpoint_uri") if infra is not None else None
    cfg = role_config(
        ctx.spec,
        "worker",
        stack_id=ctx.run_id,
        runs_root=ctx.paths.root,
        spec_path=ctx.spec_path,
        plan=plan,
        region_uri=uri if isinstance(uri, str) else None,
    )
    (ctx.paths.dir / "worker.config.json").write_text(cfg.to_json())
    return run_worker(cfg, plan, infra)


def missing_program(job: BurstJob, exc: OSError) -> BadInputError | None:
    """``training.command``'s program could not be started (it does not exist here, or is not
    executable): one line naming it, exit 2 (bad input, not retried), instead of an
    unexpected ``FileNotFoundError``. None for any other OSError."""
    from burst.program.process import interpreted

    command = job.training.command
    if not command or not isinstance(exc, FileNotFoundError | PermissionError):
        return None
    first = interpreted(list(command))[0]
    if exc.filename is None or os.path.basename(str(exc.filename)) != os.path.basename(first):
        return None
    why = (
        "is not executable (chmod +x, or start it with python)"
        if isinstance(exc, PermissionError)
        else "is not found (not on PATH, nor an executable file)"
    )
    return BadInputError(
        f"training.command: {first!r} {why} in the train step's environment (working "
        f"directory {os.getcwd()}); the program did not start"
    )


if __name__ == "__main__":
    from burst.train.quick_exit import quick_exit

    quick_exit(main("train", run))  # (no interpreter teardown: seconds after a save)
