"""The record of every attempt of a run's train step: ``runs/<run-id>/train-attempts.jsonl``.

One JSON object a line, appended when an attempt ends (done, preempted or failed), so the
last attempt's document can list them all: where each resumed from, whether it was
preempted, what the emergency save chose, and the costs it measured (the next attempt starts
from those measurements).
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

FILE_NAME = "train-attempts.jsonl"


class AttemptLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    def read(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        out = []
        for n, line in enumerate(self.path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                # A line cut by a kill mid-write: the attempt it described is lost, not the run.
                log.warning("%s:%d: not a JSON record, skipped", self.path, n)
                continue
            if isinstance(rec, dict):
                out.append(rec)
        return out

    def append(self, record: dict[str, Any]) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps(record, sort_keys=True, default=str) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())
