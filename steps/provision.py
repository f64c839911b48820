"""provision: apply the run's Terraform stack in the plan's first candidate, failing over."""

from __future__ import annotations

import sys
from typing import Any

from burst.infra.provision import provision
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    plan = ctx.input("plan")
    ctx.fail_point("before")
    return provision(ctx.spec, ctx.run_id, ctx.paths.terraform, plan.get("candidates", []))


if __name__ == "__main__":
    sys.exit(main("provision", run))
