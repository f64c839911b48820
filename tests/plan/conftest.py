"""Helpers for the planner's tests: the quickstart spec with changes."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from burst.spec import BurstJob, parse_spec

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


def spec_dict(**changes: Any) -> dict[str, Any]:
    """The quickstart as a dict; ``changes`` maps dotted paths to new values."""
    doc = copy.deepcopy(yaml.safe_load(QUICKSTART.read_text()))
    for dotted, value in changes.items():
        node = doc
        *parents, last = dotted.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = value
    return doc


def make_spec(**changes: Any) -> BurstJob:
    return parse_spec(yaml.safe_dump(spec_dict(**changes)), "<test spec>")


def write_spec(path: Path, **changes: Any) -> Path:
    path.write_text(yaml.safe_dump(spec_dict(**changes)))
    return path
