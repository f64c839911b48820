"""The catalog: every default fact sourced and dated, user overrides, one-line errors."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from burst.errors import BadInputError
from burst.plan.catalog import DEFAULT_CATALOG, load_catalog

REPO = Path(__file__).resolve().parents[2]


IDENTITY = {"provider", "region", "gpu_type", "instance", "gpus_per_instance"}


def _facts(node: object, path: str = "") -> list[tuple[str, dict]]:
    """Every {value, source, date} mapping in a raw catalog document; any other scalar that
    is not an entry's identity is reported as a fact without provenance."""
    found: list[tuple[str, dict]] = []
    if isinstance(node, dict):
        if "value" in node:
            found.append((path, node))
        else:
            for k, v in node.items():
                if k in IDENTITY:
                    continue
                found += _facts(v, f"{path}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            found += _facts(v, f"{path}[{i}]")
    else:
        found.append((path, {"bare": node}))
    return found


def test_every_default_value_has_a_source_and_a_date() -> None:
    raw = yaml.safe_load(DEFAULT_CATALOG.read_text())
    facts = _facts({k: v for k, v in raw.items() if k not in ("sources", "catalog_version")})
    assert len(facts) > 80
    for path, fact in facts:
        assert set(fact) == {"value", "source", "date"}, path
        assert isinstance(fact["source"], str) and fact["source"].strip(), path
        assert fact["date"], path


def test_defaults_come_from_the_fact_sheet_and_seeds() -> None:
    cat = load_catalog(use_env=False)
    p5 = cat.offer("aws", "ap-southeast-3", "h100")
    assert p5 is not None and p5.gpus_per_instance == 8
    assert p5.facts["on_demand_usd_per_hour"].value == 75.9552
    assert cat.offer("aws", "me-central-1", "h200").facts["on_demand_usd_per_hour"].value == (
        75.9552
    )
    # no price in the sources: unknown, never invented
    sg = cat.offer("aws", "ap-southeast-1", "h100")
    assert sg.facts["on_demand_usd_per_hour"].value is None
    assert sg.facts["availability"].value == "unknown"
    # Rubin: no offer anywhere; the seeds' reference prices, labelled (tests/plan/test_rubin_catalog.py)
    assert cat.gpus["rubin"]["reference_spot_usd_per_gpu_hour"].value == 6.0
    assert not any(k[2] == "rubin" for k in cat.offers)
    assert cat.provider_fact("aws", "notice_s").value == 120
    assert cat.provider_fact("gcp", "notice_s").value == 30
    assert cat.link("cross_continent") == {"gb_per_s": 0.18, "latency_ms": 102, "usd_per_gb": 0.05}


def test_user_file_overrides_one_field(tmp_path: Path) -> None:
    user = tmp_path / "mine.yaml"
    user.write_text(
        "offers:\n"
        "  - provider: aws\n"
        "    region: ap-southeast-1\n"
        "    gpu_type: h100\n"
        "    spot_usd_per_hour: {value: 30.5, source: 'our AWS quote', date: 2026-11-01}\n"
        "providers:\n"
        "  aws:\n"
        "    notice_s: {value: 90, source: measured, date: 2026-10}\n"
    )
    cat = load_catalog([user], use_env=False)
    sg = cat.offer("aws", "ap-southeast-1", "h100")
    assert sg.facts["spot_usd_per_hour"].value == 30.5
    assert sg.facts["spot_usd_per_hour"].file == str(user)
    assert sg.facts["spot_usd_per_hour"].date == "2026-11-01"
    assert sg.instance == "p5.48xlarge"  # untouched fields stay
    assert sg.facts["availability"].value == "unknown"
    assert cat.provider_fact("aws", "notice_s").value == 90
    assert cat.provider_fact("aws", "cross_az_usd_per_gb").value == 0.01


def test_env_var_file_then_cli_file_wins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = tmp_path / "env.yaml"
    env.write_text(
        "assumptions:\n  mfu: {value: 0.3, source: env, date: 2026}\n"
        "  restart_s: {value: 10, source: env, date: 2026}\n"
    )
    cli = tmp_path / "cli.yaml"
    cli.write_text("assumptions:\n  mfu: {value: 0.5, source: cli, date: 2026}\n")
    monkeypatch.setenv("BURST_CATALOG", str(env))
    cat = load_catalog([cli])
    assert cat.assumption("mfu") == 0.5
    assert cat.assumption("restart_s") == 10
    assert cat.files[-2:] == [str(env), str(cli)]


def test_new_offer_needs_every_field(tmp_path: Path) -> None:
    user = tmp_path / "new.yaml"
    user.write_text(
        "offers:\n  - {provider: aws, region: me-south-1, gpu_type: h100,"
        " instance: p5.48xlarge, gpus_per_instance: 8,"
        " on_demand_usd_per_hour: {value: 70, source: quote, date: 2026}}\n"
    )
    with pytest.raises(BadInputError) as exc:
        load_catalog([user], use_env=False)
    line = exc.value.one_line()
    assert str(user) in line and "aws/me-south-1/h100" in line
    assert "spot_usd_per_hour" in line or "availability" in line


BAD = [
    (
        "offers:\n  - {provider: aws, region: ap-southeast-3, gpu_type: h100,"
        " on_demand_usd_per_hour: {value: cheap, source: x, date: 2026}}\n",
        "offers[0] aws/ap-southeast-3/h100: on_demand_usd_per_hour: value must be a number",
    ),
    (
        "offers:\n  - {provider: aws, region: ap-southeast-3, gpu_type: h100,"
        " spot_usd_per_hour: {value: -1, source: x, date: 2026}}\n",
        "offers[0] aws/ap-southeast-3/h100: spot_usd_per_hour: value must be >= 0",
    ),
    (
        "offers:\n  - {provider: aws, region: ap-southeast-3, gpu_type: h100,"
        " spot_usd_per_hour: {value: 3}}\n",
        "offers[0] aws/ap-southeast-3/h100: spot_usd_per_hour: missing 'source'",
    ),
    ("offers:\n  - {provider: aws, gpu_type: h100}\n", "offers[0]: region: required"),
    (
        "providers:\n  aws:\n    notice: {value: 1, source: x, date: 2026}\n",
        "providers.aws: notice: unknown field",
    ),
    (
        "links:\n  same_az:\n    gb_per_s: {value: 0, source: x, date: 2026}\n",
        "links.same_az: gb_per_s: value must be > 0",
    ),
    (
        "links:\n  moon:\n    gb_per_s: {value: 1, source: x, date: 2026}\n",
        "links.moon: unknown entry",
    ),
    (
        "assumptions:\n  mfu: {value: 1.5, source: x, date: 2026}\n",
        "assumptions: mfu: value must be <= 1",
    ),
    (
        "assumptions:\n  mfu: {value: null, source: x, date: 2026}\n",
        "assumptions: mfu: value must be known here",
    ),
    (
        "gpus:\n  h100:\n    peak_tflops: {value: 900, source: x, date: yesterday}\n",
        "gpus.h100: peak_tflops: date must be YYYY",
    ),
    (
        "offers:\n  - {provider: aws, region: ap-southeast-3, gpu_type: h100,"
        " availability: {value: plenty, source: x, date: 2026}}\n",
        "availability: value must be one of available, unknown, unavailable",
    ),
    ("prices: {}\n", "prices: unknown section"),
    ("offers: [\n", "not valid YAML"),
    ("- just a list\n", "a catalog must be a YAML mapping"),
]


@pytest.mark.parametrize(("text", "needle"), BAD)
def test_bad_catalog_is_one_line_naming_file_entry_field(
    tmp_path: Path, text: str, needle: str
) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(text)
    with pytest.raises(BadInputError) as exc:
        load_catalog([user], use_env=False)
    line = exc.value.one_line()
    assert line.startswith(str(user)), line
    assert needle in line, line
    assert "\n" not in line


def test_missing_catalog_file() -> None:
    with pytest.raises(BadInputError, match="no such catalog file"):
        load_catalog(["/nonexistent/catalog.yaml"], use_env=False)


def test_cli_bad_catalog_exit_2_no_traceback(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    user = tmp_path / "bad.yaml"
    user.write_text(
        "offers:\n  - {provider: aws, region: ap-southeast-3, gpu_type: h100,"
        " on_demand_usd_per_hour: {value: '75', source: x, date: 2026}}\n"
    )
    proc = burst_cli(["plan", str(REPO / "examples/quickstart.yaml"), "--catalog", str(user)])
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert f"{user}:2: offers[0] aws/ap-southeast-3/h100: on_demand_usd_per_hour" in proc.stderr
