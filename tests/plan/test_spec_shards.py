"""data.shards in the spec: a dataset already split over regions can be trained where it is."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.errors import SpecError
from burst.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def _spec(tmp_path: Path, shards: str, size: str = "100000") -> Path:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    text = text.replace("  size_gb: 0.01", f"  size_gb: {size}")
    text = text.replace("  region: ap-southeast-1\n", f"  region: ap-southeast-1\n{shards}")
    p = tmp_path / "sharded.yaml"
    p.write_text(text)
    return p


def test_spec_shards_let_the_plan_train_where_the_data_is(
    tmp_path: Path, burst_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    spec = _spec(tmp_path, "  shards: {ap-southeast-1: 60000, ap-southeast-3: 40000}\n")
    proc = burst_cli(["plan", str(spec), "--json"])
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout)
    assert plan["data"]["strategy"] == "regional_shards"
    assert {c["data_strategy"] for c in plan["candidates"]} == {"regional_shards"}

    unsharded = _spec(tmp_path, "")
    proc = burst_cli(["plan", str(unsharded), "--json"])
    assert json.loads(proc.stdout)["data"]["strategy"] != "regional_shards"


def test_negative_shard_size_is_a_spec_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path, "  shards: {ap-southeast-1: -5}\n")
    with pytest.raises(SpecError) as info:
        parse_spec(spec.read_text(), "s.yaml")
    assert "data.shards.ap-southeast-1" in info.value.problems[0]
