"""Property test (hypothesis): specs, policy files and catalogs with out-of-range, non-finite,
wrong-type and duplicated values are refused with exit 2 (or 3), one line per problem, no
traceback, nothing provisioned; the whole test is bounded by a timeout (a hang fails it).

Examples are derandomized (the same ones on every run; no example database), so a failure
replays as it is: hypothesis prints the falsifying example.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .cli import REFUSED, burst

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = (REPO / "examples" / "quickstart.yaml").read_text()

PROPERTY = settings(
    max_examples=40,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Values that are wrong for every numeric field they replace.
ALWAYS_BAD = [
    ".inf",
    "-.inf",
    ".nan",
    "1e999",
    "-1e999",
    str(2**64),
    str(-(2**70)),
    "2026-02-30",
    "2026-13-45",
    "true",
    "false",
    "[1, 2]",
    "{a: 1}",
    "'12'",
    "'" + "9" * 5000 + "'",
    "~",
]
# Values wrong for some fields and fine for others: exit 0 or 2, never anything else.
MAYBE_BAD = ["0", "-1", "1", "0.5", "1e30", "1e-30", "4096", "4294967296", "1000000000"]

NUMERIC_LINES = [
    "  size_gb: 0.01",
    "  parameters: 1.0e5",
    "  gpu_count: 8",
    "  steps: 30",
    "  seed: 1234",
    "  batch_size: 32",
    "  learning_rate: 0.01",
    "    interval_steps: 5",
    "    full_every: 2",
    "    keep_full: 2",
    "    keep_weights: 3",
    "  max_usd: 5000",
    "  max_hours: 24",
]


def check_refusal(r_code: int, lines: list[str], source: str) -> None:
    assert r_code in REFUSED, (r_code, lines)
    assert lines, "a refusal says why"
    for line in lines:
        assert len(line) < 1500, line[:200]  # a short prefix of a value, never all of it


@pytest.mark.timeout(600)
@PROPERTY
@given(
    line=st.sampled_from(NUMERIC_LINES),
    value=st.sampled_from([*ALWAYS_BAD, *MAYBE_BAD]),
    duplicate=st.booleans(),
)
def test_specs_with_bad_numbers_are_refused_in_one_line_each(
    line: str, value: str, duplicate: bool
) -> None:
    key = line.strip().split(":")[0]
    indent = line[: len(line) - len(line.lstrip())]
    new = f"{indent}{key}: {value}"
    if duplicate:  # the key twice: the second must not silently win
        new = f"{line}\n{new}"
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(QUICKSTART.replace(line, new, 1))
        runs = Path(tmp) / "runs"
        r = burst("validate", "--offline", str(spec), env={"BURST_RUNS_ROOT": str(runs)})
        if duplicate or value in ALWAYS_BAD:
            assert r.code == 2, (new, r.err)
        if r.code == 0:
            return
        check_refusal(r.code, r.lines, str(spec))
        *problems, summary = r.lines
        assert summary == f"burst: {len(problems)} problem(s) in {spec}"
        for p in problems:  # file:LINE: field: problem
            assert p.startswith(f"{spec}:") and p.split(":")[1].isdigit(), p
        assert not runs.exists()  # nothing provisioned, not even a run directory


SETTINGS_VALUES = [*ALWAYS_BAD, "0", "-5", "100000", "3651", "1.5"]


@pytest.mark.timeout(600)
@settings(PROPERTY, max_examples=12)
@given(value=st.sampled_from(SETTINGS_VALUES), duplicate=st.booleans())
def test_policy_settings_out_of_range_are_refused(value: str, duplicate: bool) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pol = Path(tmp) / "policies"
        shutil.copytree(REPO / "policies", pol)
        path = pol / "settings.yaml"
        text = path.read_text()
        new = f"max_fact_age_days: {value}"
        if duplicate:
            new = f"max_fact_age_days: 365\n{new}"
        path.write_text(text.replace("max_fact_age_days: 365", new, 1))
        r = burst("policy", "check", "--policies", str(pol))
        assert r.code == 2, (new, r.err)
        assert len(r.lines) == 1 and "settings.yaml:" in r.lines[0], r.lines
        check_refusal(r.code, r.lines, str(path))


CATALOG_FACTS = [
    ("assumptions", "mfu"),
    ("assumptions", "startup_s"),
    ("assumptions", "upload_gb_per_s"),
    ("assumptions", "on_demand_node_mtbf_hours"),
]


@pytest.mark.timeout(600)
@settings(PROPERTY, max_examples=16)
@given(
    fact=st.sampled_from(CATALOG_FACTS),
    value=st.sampled_from([*ALWAYS_BAD, "-1", "1e13"]),
    date=st.sampled_from(["2026-01-01", "2026-02-30", "2026-13-45", "tomorrow"]),
    duplicate=st.booleans(),
)
def test_catalogs_with_bad_facts_are_refused(
    fact: tuple[str, str], value: str, date: str, duplicate: bool
) -> None:
    section, name = fact
    body = f"  {name}: {{value: {value}, source: s, date: {date}}}\n"
    if duplicate:
        body = f"  {name}: {{value: 1, source: s, date: 2026-01-01}}\n" + body
    with tempfile.TemporaryDirectory() as tmp:
        cat = Path(tmp) / "cat.yaml"
        cat.write_text(f"catalog_version: 1\n{section}:\n{body}")
        runs = Path(tmp) / "runs"
        r = burst(
            "plan",
            str(REPO / "examples" / "quickstart.yaml"),
            "--catalog",
            str(cat),
            env={"BURST_RUNS_ROOT": str(runs)},
        )
        assert r.code == 2, (body, r.err)
        assert len(r.lines) == 1 and f"{cat}:" in r.lines[0], r.lines
        check_refusal(r.code, r.lines, str(cat))
        assert not runs.exists()
