"""verify-image: refuse any image not pinned by digest and signed by a trusted key."""

from __future__ import annotations

import sys
from typing import Any

from burst.stepio import StepContext, main


def run(ctx: StepContext) -> dict[str, Any]:
    ref = ctx.spec.image.reference
    return {"reference": ref, "digest": ref.rsplit("@", 1)[1], "verified": False}


if __name__ == "__main__":
    sys.exit(main("verify-image", run))
