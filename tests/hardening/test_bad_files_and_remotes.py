"""Policy files, catalogs, decision records, simulator arguments and remote endpoints: each
mistake is one line with the right exit code (issue 15)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from .cli import burst

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


@pytest.fixture
def policies(tmp_path: Path) -> Path:
    dst = tmp_path / "policies"
    shutil.copytree(REPO / "policies", dst)
    return dst


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def test_policy_check_rejects_an_out_of_range_setting(policies: Path) -> None:
    edit(policies / "settings.yaml", "max_fact_age_days: 365", "max_fact_age_days: 100000")
    r = burst("policy", "check", "--policies", str(policies))
    assert r.code == 2 and len(r.lines) == 1
    assert "settings.yaml:3:" in r.lines[0] and "max_fact_age_days" in r.lines[0]


@pytest.mark.parametrize(
    ("value", "words"),
    [("true", "valid integer"), (".inf", "finite"), ("2026-02-30", "not a valid date")],
)
def test_policy_settings_of_the_wrong_kind_are_one_line(
    policies: Path, value: str, words: str
) -> None:
    edit(policies / "settings.yaml", "max_fact_age_days: 365", f"max_fact_age_days: {value}")
    r = burst("policy", "check", "--policies", str(policies))
    assert r.code == 2 and len(r.lines) == 1 and words in r.lines[0], r.lines


def test_a_duplicated_key_in_a_policy_file_names_its_line(policies: Path) -> None:
    path = policies / "settings.yaml"
    path.write_text(path.read_text() + "max_fact_age_days: 30\n")
    r = burst("policy", "check", "--policies", str(policies))
    last = len(path.read_text().splitlines())
    assert r.code == 2 and len(r.lines) == 1
    assert f"settings.yaml:{last}:" in r.lines[0] and "duplicated key" in r.lines[0]


def test_a_broken_rego_rule_is_one_line_not_the_engine_dump(
    policies: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (policies / "rules" / "broken.rego").write_text(
        'package burst.broken\n\ndeny contains msg if { input.a == ; msg := "x" }\n'
    )
    r = burst("policy", "check", "--policies", str(policies))
    assert r.code == 2 and len(r.lines) == 1
    assert "broken.rego:3: Rego error" in r.lines[0]
    dumped = capfd.readouterr()  # what the engine wrote to the file descriptors themselves
    assert "wellformed_error" not in dumped.out + dumped.err


@pytest.mark.parametrize(
    ("value", "date", "words"),
    [
        (".inf", "2026-01-01", "finite"),
        (".nan", "2026-01-01", "finite"),
        ("true", "2026-01-01", "must be a number"),
        ("0.4", "2026-13-45", "not a valid date"),
        ("0.4", "2026-02-30", "not a valid date"),
    ],
)
def test_bad_catalog_values_are_one_line(tmp_path: Path, value: str, date: str, words: str) -> None:
    cat = tmp_path / "cat.yaml"
    cat.write_text(
        "catalog_version: 1\nassumptions:\n"
        "  startup_s: {value: 600, source: s, date: 2026-01-01}\n"
        f"  mfu: {{value: {value}, source: s, date: {date}}}\n"
    )
    r = burst("plan", str(QUICKSTART), "--catalog", str(cat))
    assert r.code == 2 and len(r.lines) == 1, r.lines
    assert f"{cat}:4:" in r.lines[0] and words in r.lines[0], r.lines


def test_a_catalog_figure_beyond_its_bound_names_file_line_and_field(tmp_path: Path) -> None:
    cat = tmp_path / "cat.yaml"
    cat.write_text(
        "catalog_version: 1\nassumptions:\n  startup_s:\n"
        "    value: 1e13\n    source: s\n    date: 2026-01-01\n"
    )
    r = burst("plan", str(QUICKSTART), "--catalog", str(cat))
    assert r.code == 2 and len(r.lines) == 1, r.lines
    assert f"{cat}:4: assumptions: startup_s: value must be <= 1e+12" in r.lines[0], r.lines


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--mtbf", "1e300"], "mtbf must be a finite number"),
        (["--mtbf", "nan"], "mtbf must be a finite number"),
        (["--mtbf", "3600", "--seed", str(2**70)], "--seed must be"),
        (["--mtbf", "3600", "--restart", "inf"], "restart must be a finite number"),
        (["--mtbf", "1", "--checkpoint-cost", "0", "--step-time", "1e-6"], "more than"),
    ],
)
def test_simulate_refuses_what_it_cannot_bound(args: list[str], words: str) -> None:
    r = burst("simulate", *args)
    assert r.code == 2 and len(r.lines) == 1 and words in r.lines[0], r.lines


def test_a_long_simulation_is_sampled_and_says_so() -> None:
    r = burst("simulate", "--mtbf", "3600", "--work", "1e10", "--replicas", "2")
    assert r.code == 0, r.err
    assert "sampled:" in r.out


def test_a_decision_record_that_is_not_json_names_its_file(tmp_path: Path) -> None:
    record = tmp_path / "decision.json"
    record.write_text("not json at all")
    r = burst("plan", str(QUICKSTART), "--decision", str(record))
    assert r.code == 2 and len(r.lines) == 1
    assert r.lines[0].startswith(f"burst: error: {record}:1: the decision record is not valid")


@pytest.mark.parametrize(
    ("server", "code", "words"),
    [
        ("http://127.0.0.1:1", 4, "cannot reach the Argo server http://127.0.0.1:1 (ARGO_SERVER)"),
        ("http://exa mple", 2, "ARGO_SERVER='http://exa mple' is not a valid URL"),
        ("http://host:99999", 2, "is not a valid URL"),
        ("ftp://host", 2, "scheme must be http or https"),
    ],
)
def test_argo_endpoint_failures_name_the_endpoint_and_variable(
    server: str, code: int, words: str
) -> None:
    env = {"ARGO_SERVER": server, "ARGO_TOKEN": "t", "NO_PROXY": "*", "no_proxy": "*"}
    r = burst("status", "wf-1", "--no-follow", env=env)
    assert r.code == code and len(r.lines) == 1 and words in r.lines[0], r.lines


def test_reap_without_aws_credentials_is_one_line_exit_4(tmp_path: Path) -> None:
    env: dict[str, str | None] = {
        "AWS_ACCESS_KEY_ID": None,
        "AWS_SECRET_ACCESS_KEY": None,
        "AWS_SESSION_TOKEN": None,
        "AWS_PROFILE": None,
        "AWS_WEB_IDENTITY_TOKEN_FILE": None,
        "AWS_ENDPOINT_URL": None,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "BURST_RUNS_ROOT": str(tmp_path / "runs"),
    }
    r = burst("reap", "--region", "ap-southeast-1", env=env)
    assert r.code == 4, r.err
    errors = [ln for ln in r.lines if "error" in ln]
    assert len(errors) == 1 and "no AWS credentials" in errors[0] and "--region" in errors[0]


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"AWS_ENDPOINT_URL": "not a url"}, "AWS_ENDPOINT_URL='not a url' is not a valid URL"),
        ({"BURST_REAP_REGIONS": "bad region!"}, "BURST_REAP_REGIONS: 'bad region!'"),
    ],
)
def test_reap_with_malformed_settings_is_exit_2(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    r = burst("reap", env={**env, "BURST_RUNS_ROOT": str(tmp_path / "runs")})
    if "BURST_REAP_REGIONS" not in env:
        r = burst(
            "reap", "--region", "ap-southeast-1", env={**env, "BURST_RUNS_ROOT": str(tmp_path)}
        )
    assert r.code == 2 and len(r.lines) == 1 and words in r.lines[0], r.lines
