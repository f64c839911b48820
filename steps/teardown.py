"""teardown: destroy the run's infrastructure, found from the run id alone; count what is left.

It never reads provision's outputs: it must work whatever failed before it.
"""

from __future__ import annotations

import sys
from typing import Any

from burst.errors import LeakError
from burst.infra.teardown import destroy_run
from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    result = destroy_run(ctx.paths.terraform)
    if result["resources_remaining"]:
        err = LeakError(
            f"{result['resources_remaining']} resource(s) remain in {result['terraform_state']}"
        )
        err.doc = result  # type: ignore[attr-defined]
        raise err
    return result


if __name__ == "__main__":
    sys.exit(main("teardown", run))
