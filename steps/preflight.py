"""preflight: legal checks per candidate (region, provider) -> decision record."""

from __future__ import annotations

import sys
from typing import Any

from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    job = ctx.spec
    decisions = [
        {"region": r, "provider": p, "verdict": "review", "reasons": []}
        for p in job.compute.providers
        for r in job.compute.regions
    ]
    return {"spec_sha256": job.sha256(), "decisions": decisions}


if __name__ == "__main__":
    sys.exit(main("preflight", run))
