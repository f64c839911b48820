"""A run whose report.json cannot be read ended, and nothing says how (issue 46, live views from
facts, never from a document's existence): it is `unknown`, with a note naming the file, not
`lost` (exit 137, "no report.json and its driver's heartbeat lapsed: the run was killed or
lost", `burst down` suggested), which is what an unreadable report made of a run that ended."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_run import RUN_ID

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_an_unreadable_report_is_unknown_not_lost(run_dir: Path, burst_cli: Cli) -> None:
    (run_dir / "report.json").write_text('{"run_id": "trunc')  # cut short
    proc = burst_cli(["status", RUN_ID, "--json"])
    st = json.loads(proc.stdout)
    assert (st["status"], st["exit_code"], st["ending"]) == ("unknown", None, None), st
    assert proc.returncode == 1  # `burst status RUN && ...` never goes on from an unknown run
    text = burst_cli(["report", RUN_ID]).stdout
    assert "report.json: unreadable" in text and "report.json cannot be read" in text, text
    assert "killed or lost" not in text and "burst down" not in text
    rows = json.loads(burst_cli(["runs", "--json"]).stdout)
    assert [r["status"] for r in rows if r["run_id"] == RUN_ID] == ["unknown"]
