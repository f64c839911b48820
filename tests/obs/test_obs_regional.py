"""`burst report` and `burst runs` read a regional-sync run (issue 25 bug 5). Before: a
succeeded regional run showed as RUNNING, 0.0 s, "leaks: unknown", with 26 "unknown field"
notes and an HTML page without its rounds; its region workspaces were listed as runs."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_regional import LOSSES, REGIONS, RUN_ID, make_regional_run

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_report_of_a_succeeded_regional_run(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_regional_run(root)
    page = tmp_path / "report.html"
    proc = burst_cli(["report", RUN_ID, "--runs-root", str(root), "--html", str(page)])
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert f"run {RUN_ID}: SUCCEEDED" in text
    assert "wall time 43.3s" in text  # the runner's timeline, first start to last end
    assert "leaks: none (0 resources remaining)" in text
    assert "note:" not in text  # nothing set aside: the report was read with its model
    assert "rounds 3/3; loss by round: 0.7312, 0.3998, 0.2655" in text
    assert "regions torn down: ap-southeast-1, me-central-1" in text
    assert "regions(1:me-central-1).train" in text
    html = page.read_text()
    assert 'id="status"' in html and ">succeeded</span>" in html
    assert 'id="regional"' in html and 'class="loss"' in html
    assert html.count("<circle") >= len(LOSSES)  # one dot a round on the loss curve


def test_report_json_of_a_regional_run(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_regional_run(root)
    proc = burst_cli(["report", RUN_ID, "--runs-root", str(root), "--json"])
    assert proc.returncode == 0, proc.stderr
    s = json.loads(proc.stdout)
    assert s["kind"] == "regional-sync" and s["status"] == "succeeded"
    assert s["warnings"] == [] and s["resources_remaining"] == 0
    assert s["wall_seconds"] > 40
    assert [r["loss"] for r in s["regional"]["rounds"]] == LOSSES
    assert s["regional"]["regions"] == REGIONS
    assert s["final_weights_sha256"] == "ab" * 32


def test_runs_lists_a_regional_run_once_as_succeeded(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    make_regional_run(root)
    proc = burst_cli(["runs", "--runs-root", str(root), "--json"])
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [r["run_id"] for r in rows] == [RUN_ID]  # not its region workspaces
    assert rows[0]["status"] == "succeeded" and rows[0]["resources_remaining"] == 0
    assert rows[0]["kind"] == "regional-sync"


def test_an_unproven_region_teardown_counts_as_left(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    d = make_regional_run(root)
    doc = json.loads((d / "report.json").read_text())
    doc["regional"]["torn_down"] = REGIONS[:1]
    (d / "report.json").write_text(json.dumps(doc))
    proc = burst_cli(["report", RUN_ID, "--runs-root", str(root)])
    assert "LEAKS: 1 resource(s) remaining" in proc.stdout


def test_status_and_logs_of_a_regional_run(burst_cli: Cli, tmp_path: Path) -> None:
    """The day-two commands on a regional run whose directory holds its steps' documents
    (``docs/``): before issue 42 each of them (and `burst runs`, `burst report`) failed with
    ``unexpected error: KeyError: 'preflight'`` (exit 1)."""
    root = tmp_path / "runs"
    make_regional_run(root)
    for command in ("status", "logs"):
        proc = burst_cli([command, RUN_ID, "--runs-root", str(root)])
        assert proc.returncode == 0, (command, proc.stderr)
        assert "unexpected error" not in proc.stderr, (command, proc.stderr)
    status = burst_cli(["status", RUN_ID, "--runs-root", str(root)]).stdout
    assert "regions(1:me-central-1).train: succeeded exit 0" in status
