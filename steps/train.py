"""train: run the training loop on the provisioned node group; resume from the latest full
checkpoint; exit 0 when done, 75 when preempted (requeue) after saving what fitted."""

from __future__ import annotations

import os
import sys
from typing import Any

from burst.stepio import StepContext, main


def resolve_watchers(infra: dict[str, Any] | None) -> None:
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
    provider = str(((infra or {}).get("candidate") or {}).get("provider", "")).lower()
    export("BURST_PREEMPT_WATCHERS", provider if provider in WATCHERS else "none")


def run(ctx: StepContext) -> dict[str, Any]:
    ctx.fail_point("before")
    resolve_watchers(ctx.optional_input("infra"))
    from burst.train.launch import launch, wanted  # (no torch in this process)

    if wanted(ctx.spec, dict(os.environ)):
        return launch(ctx, ctx.spec)  # the ranks run this module again, under torchrun
    from burst.train.loop import train

    return train(
        ctx.spec,
        ctx.run_id,
        ctx.paths.dir,
        ctx.optional_input("plan"),
        ctx.optional_input("infra"),
    )


if __name__ == "__main__":
    sys.exit(main("train", run))
