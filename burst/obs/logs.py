"""Logging setup: human-readable lines in a terminal, JSON lines (with run id and step) otherwise.

Library code only calls ``logging.getLogger(__name__)``; the CLI and step entry points call
``setup_logging`` once.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any


class JsonLineFormatter(logging.Formatter):
    def __init__(self, run_id: str | None, step: str | None) -> None:
        super().__init__()
        self.run_id = run_id
        self.step = step

    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, Any] = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
            "run_id": getattr(record, "run_id", None) or self.run_id,
            "step": getattr(record, "step", None) or self.step,
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            doc.update(fields)
        if record.exc_info:
            doc["exc"] = self.formatException(record.exc_info)
        return json.dumps(doc, default=str)


class HumanFormatter(logging.Formatter):
    def __init__(self, run_id: str | None, step: str | None) -> None:
        super().__init__()
        self.prefix = f"[{step}] " if step else ""

    def format(self, record: logging.LogRecord) -> str:
        t = time.strftime("%H:%M:%S", time.localtime(record.created))
        line = f"{t} {record.levelname.lower():7s} {self.prefix}{record.getMessage()}"
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


def setup_logging(
    level: int = logging.INFO,
    *,
    json_lines: bool | None = None,
    run_id: str | None = None,
    step: str | None = None,
    stream: Any = None,
) -> None:
    """Configure the root logger once. JSON lines when asked, or when stderr is not a TTY and
    BURST_LOG_JSON is set; run id and step default to BURST_RUN_ID / BURST_STEP."""
    stream = stream or sys.stderr
    from burst.settings import current

    env = current()
    run_id = run_id or env.run_id or None
    step = step or env.step or None
    if json_lines is None:
        json_lines = env.log_json
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonLineFormatter(run_id, step) if json_lines else HumanFormatter(run_id, step)
    )
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(level)
