"""preflight: legal checks per candidate (region, provider) -> decision record.

The document this step writes IS the decision record (see burst/policy/record.py): spec and
policy hashes, time, and per candidate a verdict with reasons. Policies come from
$BURST_POLICIES, else the repository's policies/. When no candidate is allowed the record is
still written (the run report shows why) and the step exits 3.

Before the legal checks, what can be checked before renting is (``ready_before_renting``).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from burst.errors import PolicyRefusal
from burst.policy import evaluate, first_reason, load_policies
from burst.readiness import check_entrypoint, check_stores
from burst.runs import write_json_atomic
from burst.settings import current
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    job = ctx.spec
    ready_before_renting(ctx)
    record = evaluate(job, load_policies())
    if not record["allowed"]:
        doc = {**record, "step": ctx.step, "run_id": ctx.run_id}
        write_json_atomic(ctx.paths.doc(ctx.step), doc)
        if ctx.out is not None:
            write_json_atomic(ctx.out, doc)
        first = first_reason(record["decisions"][0]) if record["decisions"] else "no candidates"
        raise PolicyRefusal(
            f"no candidate is allowed ({record['counts']['deny']} denied, "
            f"{record['counts']['review']} to review); first: "
            f"{record['decisions'][0]['provider']}/{record['decisions'][0]['region']} "
            f"{first}; the decision record lists every reason"
        )
    return record


def ready_before_renting(ctx: StepContext) -> None:
    """Check before renting (burst.readiness): the checkpoint stores accept a write, and, on
    a rented target where this image has torch, the entrypoint builds. A failure here is
    exit 2 or 4 and nothing is provisioned. (``burst run`` rents nothing: its train step
    builds the entrypoint; ``burst validate`` checks it before any run.)"""
    check_stores(ctx.spec)
    if current().target != "local" and importlib.util.find_spec("torch") is not None:
        check_entrypoint(ctx.spec)


if __name__ == "__main__":
    sys.exit(main("preflight", run))
