"""The runs under a runs root, summarised one line each (``burst runs``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from burst.obs.run_view import load_run
from burst.runs import RUN_ID_RE

log = logging.getLogger(__name__)

# Directories under runs/ that are not runs (the local checkpoint store of the quickstart).
NOT_RUNS = {"checkpoints"}


def is_region_workspace(d: Path) -> bool:
    """A region's workspace of a regional run (``<run-id>-<region>/``: its Terraform state and
    provision/teardown documents): part of that run, not a run of its own."""
    return (
        not (d / "report.json").exists()
        and not (d / "spec.yaml").exists()
        and (d / "region").is_file()  # provision's mark in a region's branch
    )


def list_runs(root: Path) -> list[dict[str, Any]]:
    """Newest first (by the run directory's modification time). A directory is a run when it
    has a report.json, a spec.yaml or a docs/ folder (a regional run's region workspaces are
    part of their run and not listed)."""
    if not root.is_dir():
        return []
    dirs = [
        d
        for d in root.iterdir()
        if d.is_dir()
        and d.name not in NOT_RUNS
        and RUN_ID_RE.match(d.name)
        and ((d / "report.json").exists() or (d / "spec.yaml").exists() or (d / "docs").is_dir())
        and not is_region_workspace(d)
    ]
    dirs.sort(key=lambda d: (d.stat().st_mtime, d.name), reverse=True)
    rows = []
    for d in dirs:
        s = load_run(d).summary()
        rows.append(
            {
                k: s[k]
                for k in (
                    "run_id",
                    "kind",
                    "name",
                    "team",
                    "status",
                    "exit_code",
                    "ending",
                    "wall_seconds",
                    "cost_total_usd",
                    "preemptions",
                    "checkpoints",
                    "resources_remaining",
                )
            }
        )
    return rows
