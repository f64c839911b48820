"""train: run the training loop on the provisioned node group; resume from the latest full
checkpoint; exit 0 when done, 75 when preempted (requeue) after saving what fitted."""

from __future__ import annotations

import sys
from typing import Any

from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    from burst.train.loop import train

    ctx.fail_point("before")
    return train(ctx.spec, ctx.run_id, ctx.paths.dir, ctx.optional_input("plan"))


if __name__ == "__main__":
    sys.exit(main("train", run))
