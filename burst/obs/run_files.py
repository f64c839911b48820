"""Reading a run directory's files for the views (``run_view``, ``overview``): bounded and
strict like every input (``burst.inputs``), and tolerant: a file that cannot be read is a
warning of the view, never a crash of ``burst report`` / ``burst runs``."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

from burst.errors import BadInputError
from burst.inputs import parse_json, read_text

LOG_MAX_BYTES = 64 << 20  # a step log read for its JSON-line records


def read_json(path: Path, warnings: list[str]) -> dict[str, Any]:
    """A run document as a JSON object; {} (and a warning) when it is missing or unreadable."""
    if not path.exists() and not path.is_symlink():
        return {}
    try:  # bounded and strict, like every input (burst.inputs)
        doc = parse_json(read_text(path, what="run document"), path.name, what="run document")
    except BadInputError as exc:
        warnings.append(f"{path.name}: unreadable ({exc.one_line()})")
        return {}
    if not isinstance(doc, dict):
        warnings.append(f"{path.name}: not a JSON object")
        return {}
    return doc


def epoch_seconds(v: Any) -> float | None:
    """Epoch seconds from a finite number or an ISO-8601 string (``Z`` or an offset; a naive
    one is UTC); None for anything else."""
    if isinstance(v, int | float) and not isinstance(v, bool):
        f = float(v)
        return f if f == f and f not in (float("inf"), float("-inf")) else None
    if not isinstance(v, str) or not v:
        return None
    try:
        t = dt.datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return t.timestamp()
