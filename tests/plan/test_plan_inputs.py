"""Bad inputs to `burst plan` and the plan step: a decision record made for another spec,
a record that is not one, an unwritable chart path. One line, a documented exit code, no
plan written."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from burst.errors import EXIT_BAD_INPUT, EXIT_REFUSED, BadInputError, PolicyRefusal
from burst.plan.catalog import load_catalog
from burst.plan.placement import plan

from .conftest import QUICKSTART, make_spec, write_spec

REPO = Path(__file__).resolve().parents[2]


def _record(tmp_path: Path, burst_cmd: list[str], spec: Path) -> Path:
    """A real preflight record of ``spec``."""
    out = tmp_path / f"{spec.stem}-decision.json"
    proc = subprocess.run(
        [*burst_cmd, "preflight", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.exists(), proc.stderr
    return out


def _one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_library_refuses_a_record_of_another_spec() -> None:
    cat = load_catalog(use_env=False)
    other = make_spec(**{"training.steps": 31})
    record = {"spec_sha256": other.sha256(), "policy_sha256": "0" * 64, "decisions": []}
    with pytest.raises(PolicyRefusal, match="another spec") as info:
        plan(make_spec(), cat, record, decision_source="rec.json")
    assert info.value.exit_code == EXIT_REFUSED and info.value.where == "rec.json"
    with pytest.raises(BadInputError, match="no spec_sha256"):
        plan(make_spec(), cat, {"decisions": []})


@pytest.mark.e2e
def test_cli_plan_refuses_another_specs_record(burst_cmd: list[str], tmp_path: Path) -> None:
    other = write_spec(tmp_path / "other.yaml", **{"training.steps": 31})
    rec = _record(tmp_path, burst_cmd, other)
    proc = subprocess.run(
        [*burst_cmd, "plan", str(QUICKSTART), "--decision", str(rec), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == EXIT_REFUSED, proc.stderr
    line = _one_line(proc.stderr)
    assert str(rec) in line and "another spec" in line
    assert proc.stdout == ""
    # the record of the quickstart itself is accepted
    own = _record(tmp_path, burst_cmd, QUICKSTART)
    ok = subprocess.run(
        [*burst_cmd, "plan", str(QUICKSTART), "--decision", str(own), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["candidates"][0]["verdict"] == "allow"


@pytest.mark.e2e
def test_cli_plan_record_without_hash_is_bad_input(burst_cmd: list[str], tmp_path: Path) -> None:
    rec = tmp_path / "bare.json"
    rec.write_text(json.dumps({"decisions": []}))
    proc = subprocess.run(
        [*burst_cmd, "plan", str(QUICKSTART), "--decision", str(rec)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == EXIT_BAD_INPUT
    assert "no spec_sha256" in _one_line(proc.stderr)


@pytest.mark.e2e
def test_step_plan_refuses_another_specs_record(
    burst_cmd: list[str], tmp_path: Path, runs_root: Path
) -> None:
    other = write_spec(tmp_path / "other.yaml", **{"training.steps": 31})
    rec = _record(tmp_path, burst_cmd, other)
    out = tmp_path / "plan.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.plan",
            "--spec",
            str(QUICKSTART),
            "--run-id",
            "plan-other",
            "--runs-root",
            str(runs_root),
            "--input",
            f"decision={rec.read_text()}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == EXIT_REFUSED, proc.stderr
    assert "another spec" in proc.stderr and "Traceback" not in proc.stderr
    assert not out.exists()


@pytest.mark.e2e
@pytest.mark.parametrize("where", ["proc", "file-parent"])
def test_cli_unwritable_chart_is_one_line_exit_2(
    burst_cmd: list[str], tmp_path: Path, where: str
) -> None:
    if where == "proc":
        chart = Path("/proc/burst-plan-chart.png")  # procfs refuses new files, even for root
    else:
        parent = tmp_path / "a-file"
        parent.write_text("not a directory")
        chart = parent / "chart.png"
    proc = subprocess.run(
        [*burst_cmd, "plan", str(QUICKSTART), "--chart", str(chart)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == EXIT_BAD_INPUT, proc.stderr
    line = _one_line(proc.stderr)
    assert str(chart) in line and "cannot write the chart" in line
    assert proc.stdout == ""  # nothing planned is printed when the chart cannot be written
    assert not chart.exists()


@pytest.mark.e2e
def test_cli_chart_into_a_new_directory(burst_cmd: list[str], tmp_path: Path) -> None:
    chart = tmp_path / "new" / "dir" / "plan.png"
    proc = subprocess.run(
        [*burst_cmd, "plan", str(QUICKSTART), "--chart", str(chart)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
