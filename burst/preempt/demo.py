"""The local demonstration of preemption: ``burst run --preempt-at-step N``.

``BURST_PREEMPT_AT_STEPS`` (``7,19``) makes the train process send itself a real SIGTERM when
it has finished step N, once per step and run: the steps already preempted are recorded in
``runs/<run-id>/preempt-demo.json`` before the signal is sent, so the resumed attempt passes
step N again without being preempted a second time.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

from burst.errors import BadInputError
from burst.runs import write_json_atomic

log = logging.getLogger(__name__)

ENV = "BURST_PREEMPT_AT_STEPS"


def parse_steps(raw: str) -> set[int]:
    steps: set[int] = set()
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        if not item.isdigit() or int(item) < 1:
            raise BadInputError(f"{ENV}={raw!r}: {item!r} is not a step number (1 or more)")
        steps.add(int(item))
    return steps


class DemoPreemptions:
    def __init__(self, record: Path, raw: str | None = None) -> None:
        self.record = record
        from burst.settings import current

        self.wanted = parse_steps(current().preempt_at_steps if raw is None else raw)
        self.fired: set[int] = set()
        if self.wanted and record.exists():
            try:
                self.fired = {int(s) for s in json.loads(record.read_text())["fired"]}
            except (ValueError, KeyError, TypeError):
                raise BadInputError(
                    f"{record}: not a preemption record "
                    '({"fired": [steps]}); delete it to start over'
                ) from None

    def maybe_fire(self, step: int) -> bool:
        """After step ``step``: SIGTERM this process if asked to and not done before."""
        if step not in self.wanted or step in self.fired:
            return False
        self.fired.add(step)
        write_json_atomic(self.record, {"fired": sorted(self.fired)})
        log.info("demo preemption: sending SIGTERM to myself after step %d (%s)", step, ENV)
        os.kill(os.getpid(), signal.SIGTERM)
        return True
