"""plan: rank candidates (region, provider, capacity) by expected cost and time."""

from __future__ import annotations

import sys
from typing import Any

from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    job = ctx.spec
    decision = ctx.optional_input("decision") or {"decisions": []}
    candidates = [
        {"region": d["region"], "provider": d["provider"], "capacity": job.compute.capacity}
        for d in decision["decisions"]
        if d["verdict"] != "deny"
    ]
    return {"candidates": candidates}


if __name__ == "__main__":
    sys.exit(main("plan", run))
