"""burst runs: list past runs from the run directories, newest first."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


@click.command("runs")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
@click.option(
    "--argo",
    is_flag=True,
    help="Also list the Argo namespace's workflows (ARGO_SERVER, ARGO_TOKEN, ARGO_NAMESPACE).",
)
@click.option(
    "-n",
    "--limit",
    type=click.IntRange(min=1),
    default=50,
    show_default=True,
    help="Show at most this many runs.",
)
def command(runs_root: Path | None, as_json: bool, argo: bool, limit: int) -> None:
    """List past runs: id, status, exit code, wall time, cost estimate, preemptions,
    checkpoints, leaks; with --argo also the workflows submitted to Argo (exit 4 when it
    cannot be asked). STATUS is running while a run's driver lives, else how it ended
    (docs/reference/endings.md); WALL is from the clock (a running run's so far)."""
    from burst.obs.report_text import human_seconds, usd
    from burst.obs.run_list import list_runs
    from burst.runs import runs_root as default_root

    root = runs_root.resolve() if runs_root else default_root()
    rows: list[dict[str, Any]] = [{**r, "mode": "local"} for r in list_runs(root)[:limit]]
    if argo:
        from burst.obs.run_status import argo_runs
        from burst.runner.argo import settings_from_env

        rows += argo_runs(settings_from_env())[:limit]
    if as_json:
        click.echo(json.dumps(rows, indent=2, sort_keys=True, default=str))
        return
    if not rows:
        click.echo(f"no runs in {root}")
        return
    width = max(len(r["run_id"]) for r in rows)
    sw = max(9, *(len(str(r["status"])) for r in rows))
    click.echo(
        f"{'RUN':<{width}}  {'STATUS':<{sw}}  EXIT  {'WALL':>8}  {'COST':>10}  PREEMPT  CKPT  LEFT"
    )
    for r in rows:
        cost = "-" if r.get("cost_total_usd") is None else usd(r["cost_total_usd"])
        ck = "-" if r.get("checkpoints") is None else str(r["checkpoints"])
        left = "-" if r.get("resources_remaining") is None else str(r["resources_remaining"])
        code = "-" if r.get("exit_code") is None else str(r["exit_code"])
        click.echo(
            f"{r['run_id']:<{width}}  {r['status']:<{sw}}  {code:>4}  "
            f"{human_seconds(r['wall_seconds']):>8}  {cost:>10}  "
            f"{r.get('preemptions', '-'):>7}  {ck:>4}  {left:>4}"
            + ("  (argo)" if r["mode"] == "argo" else "")
        )
