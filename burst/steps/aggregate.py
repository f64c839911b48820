"""aggregate: the aggregator of a regional-sync run, in the aggregation region's branch.

Runs with ``BURST_REGION`` (the aggregation region) and ``--run-id <workflow>-<region>`` (that
region's stack id), as the branch's other steps. Its process's view of the run is derived from
the spec and the plan (``burst.plan.regional.role_config``: H, the round schedule, the
exchange store, the links), written beside its documents (``aggregator.config.json``). Each
round it waits for the regions' deltas, takes the outer step and commits the next global round
(``burst.train.aggregator``). Exit 0 when the last round's global checkpoint is committed; 75
on a stop notice (SIGTERM, a provider's metadata notice), at its next round boundary, every
committed round kept: the template's retry resumes it; 4 when no usable delta arrives in time.
"""

from __future__ import annotations

from burst.preempt.signals import watch_from_start

if __name__ == "__main__":  # first of all: a notice while the step starts is kept, not a kill
    watch_from_start()

import sys

from burst.documents import PlanDocument
from burst.documents.regional import AggregateDocument
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> AggregateDocument:
    from burst.plan.regional import role_config
    from burst.train.aggregator import run_aggregator

    cfg = role_config(
        ctx.spec,
        "aggregator",
        stack_id=ctx.run_id,
        runs_root=ctx.paths.root,
        spec_path=ctx.spec_path,
        plan=ctx.optional_input("plan", PlanDocument),
    )
    (ctx.paths.dir / "aggregator.config.json").write_text(cfg.to_json())
    return AggregateDocument.model_validate(run_aggregator(cfg))


if __name__ == "__main__":
    sys.exit(main("aggregate", run))
