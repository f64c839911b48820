"""Timeline events: structured log records the run report places on its timeline.

A step logs an event with ``emit(log, PREEMPTION, source="sigterm")``; with JSON-line logs
(``BURST_LOG_JSON=1``) the record carries ``event``, ``ts``, ``run_id`` and ``step``, and
``burst report`` reads them back from ``runs/<run-id>/logs/<step>.log``.
"""

from __future__ import annotations

import logging
from typing import Any

PREEMPTION = "preemption"
CHECKPOINT = "checkpoint.committed"
FIRST_TRAIN_STEP = "train.first_step"
PROVISION_ATTEMPT = "provision.attempt"

KNOWN_EVENTS = (PREEMPTION, CHECKPOINT, FIRST_TRAIN_STEP, PROVISION_ATTEMPT)


def emit(
    logger: logging.Logger,
    event: str,
    message: str | None = None,
    level: int = logging.INFO,
    **fields: Any,
) -> None:
    """Log one event; ``fields`` become keys of the JSON record (and ``k=v`` in a terminal)."""
    text = message or event + "".join(f" {k}={v}" for k, v in fields.items())
    logger.log(level, text, extra={"fields": {"event": event, **fields}})
