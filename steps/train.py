"""train: run the training loop on the provisioned node group; resume from the latest
checkpoint; exit 0 when done, 75 when preempted (requeue)."""

from __future__ import annotations

import sys
from typing import Any

from burst.stepio import StepContext, main
from burst.train.loop import train


def run(ctx: StepContext) -> dict[str, Any]:
    ctx.fail_point("before")
    return train(ctx.spec, ctx.run_id)


if __name__ == "__main__":
    sys.exit(main("train", run))
