"""The steps of a run, in order, and the points where ``--fail-at`` can inject a failure.

The vocabulary of ``burst run --fail-at`` and ``BURST_FAIL_AT`` (``burst.settings`` checks the
setting against it; ``burst.faults`` fires the points); it imports nothing of burst, so the
settings can read it.
"""

from __future__ import annotations

STEPS = ("preflight", "plan", "verify-image", "provision", "train", "teardown")
#: Where --fail-at can inject a failure: each step as a whole (teardown: its first two destroy
#: attempts), and the finer points the steps place themselves.
FAULT_POINTS = (*STEPS, "provision:before", "provision:midway", "train:before")
