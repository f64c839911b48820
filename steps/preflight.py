"""preflight: legal checks per candidate (region, provider) -> decision record.

The document this step writes IS the decision record (see burst/policy/record.py): spec and
policy hashes, time, and per candidate a verdict with reasons. Policies come from
$BURST_POLICIES, else the repository's policies/. When no candidate is allowed the record is
still written (the run report shows why) and the step exits 3.
"""

from __future__ import annotations

import sys
from typing import Any

from burst.errors import PolicyRefusal
from burst.policy import evaluate, first_reason, load_policies
from burst.runs import write_json_atomic
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    job = ctx.spec
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


if __name__ == "__main__":
    sys.exit(main("preflight", run))
