"""One GPU-hour figure for one run (issue 46, "Money"): `burst report` and its `--json` give the
billed GPU-hours the team ledger settled, to the ledger's precision, so the report's line and the
ledger's line print the same figure. Before: the summary rounded to 4 places and the ledger to 6,
so the quickstart's report said "GPU-hours 0.006" and, two lines down, "(0.007 GPU-hours
billed)" for the same 8 GPUs x 2.94 s."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_run import RUN_ID

from burst.documents.train import ATTEMPTS_FILE

Cli = Callable[..., subprocess.CompletedProcess[str]]
HOURS = (0.000417, 0.0004)  # two attempts' metered hours, 8 GPUs each: 0.006536 GPU-hours


def test_the_report_and_the_ledger_print_one_figure(run_dir: Path, burst_cli: Cli) -> None:
    lines = (run_dir / ATTEMPTS_FILE).read_text().splitlines()
    records = [json.loads(x) for x in lines if x.strip()]
    for rec, hours in zip(records, HOURS, strict=True):
        rec.update(hours=hours, gpus=8)
    (run_dir / ATTEMPTS_FILE).write_text("".join(json.dumps(r) + "\n" for r in records))
    billed = round(8 * sum(HOURS), 6)
    report = json.loads((run_dir / "report.json").read_text())
    report["settlement"] = {
        "team": "ml-research", "reserved_usd": 1920.0, "reserved_gpu_hours": 192.0,
        "actual_usd": 0.06, "actual_gpu_hours": billed,
    }  # fmt: skip
    (run_dir / "report.json").write_text(json.dumps(report))
    proc = burst_cli(["report", RUN_ID, "--json"])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["gpu_hours"] == billed
    text = burst_cli(["report", RUN_ID]).stdout
    (shown,) = re.findall(r"GPU-hours (\d+\.\d+) \(", text)
    assert shown == f"{billed:.3f}" == "0.007", text


def test_burst_budget_prints_a_runs_gpu_hours_as_the_report_does() -> None:
    """`burst budget`'s windows (before: 2 places, "used 0.01 GPU-hours" beside the report's
    0.007 for the one quickstart run)."""
    from burst.cli.commands.budget import _amount

    billed = round(8 * sum(HOURS), 6)
    assert _amount(billed, "gpu_hours") == f"{billed:.3f} GPU-hours" == "0.007 GPU-hours"
