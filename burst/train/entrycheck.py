"""``python -m burst.train.entrycheck``: build the spec's entrypoint and run one batch.

The child process of ``burst.readiness.check_entrypoint``: reads the spec (canonical JSON) on
stdin, seeds as the train step does, builds the entrypoint, and sends the first batch through
the model and the loss, without an optimizer step. Exit 0 when that works; otherwise one line
on stderr naming ``training.entrypoint`` and exit 2.
"""

from __future__ import annotations

import json
import math
import sys

from burst.errors import EXIT_BAD_INPUT, BurstError
from burst.inputs import clip


def main() -> int:
    from burst.spec import BurstJob

    job = BurstJob.model_validate(json.loads(sys.stdin.read()))
    entry = job.training.entrypoint
    try:
        import random

        import numpy as np
        import torch

        from burst.train.setup import build_setup

        # seeded as the train step seeds (without deterministic algorithms: their first use
        # costs seconds of imports, and this is a build check, not a run)
        random.seed(job.training.seed)
        np.random.seed(job.training.seed % 2**32)
        torch.manual_seed(job.training.seed)
        setup = build_setup(job)
        try:
            with torch.no_grad():
                x, y = setup.batch_for_step(0)
                loss = setup.loss_fn(setup.model(x), y)
        except Exception as exc:
            print(
                f"training.entrypoint {entry}: the first batch does not go through the model: "
                f"{exc.__class__.__name__}: {clip(str(exc))}",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
        if loss.numel() != 1 or not math.isfinite(float(loss)):
            print(
                f"training.entrypoint {entry}: the loss of the first batch is not one finite "
                f"number ({clip(str(loss.detach().flatten()[:4].tolist()), 80)})",
                file=sys.stderr,
            )
            return EXIT_BAD_INPUT
    except BurstError as exc:
        print(exc.one_line(), file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    sys.exit(main())
