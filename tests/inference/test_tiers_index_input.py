"""A run's ``tiers/index.json`` that is not JSON, or has wrong or missing fields, is one line
naming the file and the field, exit 2, from `burst serve` (issue 46: a pydantic dump or a
``JSONDecodeError``, exit 1, the file not named). The index lives in a store the user writes,
so it is user input like a spec: burst.inputs.parse_model, the one helper for such documents."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from burst.errors import EXIT_BAD_INPUT, BadInputError
from burst.inputs import parse_model

GOOD: dict[str, Any] = {
    "kind": "burst/tiers",
    "run_id": "tiers",
    "spec_name": "quickstart",
    "teacher_step": 30,
    "distill_steps": 10,
    "heldout_samples": 64,
    "seed": 0,
    "tiers": [],
}

CASES = {
    "not-json": ("{ this is not json", "not valid JSON"),
    "a-list": ("[1, 2]", "must be a JSON object"),
    "wrong-type": (json.dumps({**GOOD, "teacher_step": "thirty"}), "teacher_step"),
    "missing": (json.dumps({k: v for k, v in GOOD.items() if k != "seed"}), "seed"),
    "unknown": (json.dumps({**GOOD, "tier": []}), "tier"),
    "bad-tier": (json.dumps({**GOOD, "tiers": [{"name": 3}]}), "tiers[0]"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_burst_serve_names_the_index_and_the_field(
    case: str, burst_cli: Any, quickstart_in: Path, tmp_path: Path
) -> None:
    text, names = CASES[case]
    index = tmp_path / "store" / "tiers" / "tiers" / "index.json"
    index.parent.mkdir(parents=True)
    index.write_text(text)
    proc = burst_cli(["serve", quickstart_in, "--run", "tiers", "--requests", "1"])
    assert proc.returncode == EXIT_BAD_INPUT, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    assert str(index) in lines[0] and names in lines[0], lines[0]
    assert "Traceback" not in proc.stderr and "validation error" not in proc.stderr


class _Doc(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    size: int


@pytest.mark.parametrize(
    ("text", "fmt", "expect"),
    [
        ("name: a\nsize: [1\n", "yaml", "doc.yaml:3: not valid YAML"),
        ("- a\n", "yaml", "must be a YAML mapping"),
        ("name: a\nsize: big\n", "yaml", "size:"),
        ("name: a\nname: b\nsize: 1\n", "yaml", "duplicated key"),
        ('{"name": "a", "size": 1, "size": 2}', "json", "duplicated key"),
        ('{"name": "a"}', "json", "size: required field is missing"),
        ('{"name": "a", "size": 1, "x": 0}', "json", "x: unknown field"),
        (b'{"name": "\xff"}', "json", "not UTF-8"),
    ],
)
def test_every_user_document_problem_is_one_bad_input_line(
    text: str | bytes, fmt: Any, expect: str
) -> None:
    source = f"doc.{fmt}"
    with pytest.raises(BadInputError) as info:
        parse_model(_Doc, text, source, what="test document", fmt=fmt)
    line = info.value.one_line()
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert line.startswith(source) and expect in line and "\n" not in line, line
