from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.errors import SpecError
from burst.spec import json_schema, load_spec, parse_spec

REPO = Path(__file__).resolve().parents[2]

BAD = """\
name: bad
owner: alice
team: t
cost_centre: c
organization: {name: x, headquarters: SG}
data: {uri: "s3://x", size_gb: 1, classification: public, origin: SG}
model: {parameters: 100}
compute:
  gpu_type: h100
  gpu_count: eight
  regions: [ap-southeast-1]
  providers: [aws]
  colour: blue
training: {steps: 10}
image: {reference: "x@sha256:0000000000000000000000000000000000000000000000000000000000000000", trusted_key: k}
storage: {checkpoint_uri: "file://x"}
"""


def test_quickstart_is_valid() -> None:
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    assert job.name == "quickstart"
    assert job.tags("r1", "2030-01-01T00:00:00Z")["burst:run-id"] == "r1"


def test_wrong_type_missing_field_unknown_key_each_reported_with_line() -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(BAD, "bad.yaml")
    problems = info.value.problems
    assert len(problems) == 3
    assert any(p.startswith("bad.yaml:10: compute.gpu_count:") for p in problems)
    assert any(p.startswith("bad.yaml:13: compute.colour: unknown field") for p in problems)
    assert any("budget: required field is missing" in p for p in problems)


def test_validate_cli_exit_2_one_line_per_problem(
    tmp_path: Path, burst_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(BAD)
    proc = burst_cli(["validate", str(spec)])
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith(str(spec))]
    assert len(lines) == 3


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("name: [unclosed", "not valid YAML"),
        ("- a list", "must be a YAML mapping"),
    ],
)
def test_broken_yaml_is_one_clear_line(text: str, needle: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_spec(text, "x.yaml")
    assert needle in info.value.problems[0]


@pytest.mark.e2e
def test_tag_reference_refused() -> None:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    import re

    text = re.sub(r"reference: .*", "reference: registry.example/burst/trainer:latest", text)
    with pytest.raises(SpecError) as info:
        parse_spec(text, "q.yaml")
    assert "pinned by digest" in info.value.problems[0]


@pytest.mark.e2e
def test_schema_is_json_schema(burst_cmd: list[str]) -> None:
    proc = subprocess.run([*burst_cmd, "schema"], capture_output=True, text=True, check=True)
    schema = json.loads(proc.stdout)
    assert schema == json.loads(json.dumps(json_schema()))
    assert "compute" in schema["properties"]
    assert schema["additionalProperties"] is False
