"""A catalog a user can trust (issue 29): Rubin-class GPUs plan out of the box at the seeds'
figures ($6/GPU-h spot burst price, $20/GPU-h on-demand equivalent), every price says its
source and date, a user's file overrides them, and ``burst run`` takes ``--catalog`` as
``burst plan`` does. Before: "no price known for rubin", four times, exit 3."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from .conftest import write_spec

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_a_rubin_spec_plans_out_of_the_box(burst_cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "rubin.yaml", **{"compute.gpu_type": "rubin"})
    proc = burst_cli(["plan", str(spec), "--json", "--replicas", "2"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    by = {(c["region"], c["capacity"]): c for c in doc["candidates"]}
    spot = by[("ap-southeast-3", "spot")]
    od = by[("ap-southeast-3", "on_demand")]
    assert spot["price_per_gpu_hour"] == 6.0 and od["price_per_gpu_hour"] == 20.0
    for c in (spot, od):
        assert c["price_basis"] == "reference"
        assert "seed-001" in c["price_source"] and "2026-02-23" in c["price_source"]
    # the text view says where the price comes from and how to change it
    text = burst_cli(["plan", str(spec), "--replicas", "2"])
    assert text.returncode == 0, text.stderr
    assert "no offer prices rubin" in text.stdout and "--catalog FILE" in text.stdout


def test_a_users_rubin_quote_overrides_the_seeds(burst_cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "rubin.yaml", **{"compute.gpu_type": "rubin"})
    mine = tmp_path / "quote.yaml"
    mine.write_text(
        "gpus:\n  rubin:\n"
        "    reference_spot_usd_per_gpu_hour: {value: 4.5, source: 'our reseller', date: 2026-11}\n"
    )
    proc = burst_cli(["plan", str(spec), "--json", "--replicas", "2", "--catalog", str(mine)])
    assert proc.returncode == 0, proc.stderr
    spot = next(c for c in json.loads(proc.stdout)["candidates"] if c["capacity"] == "spot")
    assert spot["price_per_gpu_hour"] == 4.5 and "our reseller" in spot["price_source"]


def test_unknown_price_fails_closed_in_one_line(burst_cli: Cli, tmp_path: Path) -> None:
    spec = write_spec(tmp_path / "rubin.yaml", **{"compute.gpu_type": "rubin"})
    none = tmp_path / "none.yaml"
    none.write_text(
        "gpus:\n  rubin:\n"
        "    reference_spot_usd_per_gpu_hour: {value: null, source: 'x', date: 2026-11}\n"
        "    reference_on_demand_usd_per_gpu_hour: {value: null, source: 'x', date: 2026-11}\n"
    )
    proc = burst_cli(["plan", str(spec), "--catalog", str(none)])
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].count("no price known for rubin") == 1
    assert "--catalog FILE" in lines[0]


@pytest.mark.parametrize("command", ["run", "plan", "resume"])
def test_every_pricing_command_takes_catalog(burst_cli: Cli, command: str) -> None:
    proc = burst_cli([command, "--help"])
    assert proc.returncode == 0 and "--catalog FILE" in proc.stdout


def test_run_refuses_a_bad_catalog_before_anything(burst_cli: Cli, tmp_path: Path) -> None:
    """``burst run --catalog`` checks the file as ``burst plan`` does: one line, exit 2, no
    run directory."""
    spec = write_spec(tmp_path / "q.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus:\n  rubin:\n    reference_spot_usd_per_gpu_hour: {value: -1}\n")
    runs = tmp_path / "runs"
    proc = burst_cli(["run", str(spec), "--catalog", str(bad), "--runs-root", str(runs)])
    assert proc.returncode == 2, proc.stderr
    assert "reference_spot_usd_per_gpu_hour" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not runs.exists()
