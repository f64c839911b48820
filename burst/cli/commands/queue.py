"""burst queue: what is running, admitted, refused and settled per team; `burst queue
simulate` replays a trace against burst's admission policy and two baselines."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import click

from burst.cli.commands.budget import ledger_option, open_ledger


def _when(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%d %H:%M")


@click.group("queue", invoke_without_command=True)
@ledger_option
@click.option("--team", "teams", multiple=True, help="Only this team (repeatable).")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories live, for their heartbeats (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the queue as JSON.")
@click.pass_context
def command(
    ctx: click.Context,
    ledger_url: str | None,
    teams: tuple[str, ...],
    runs_root: Path | None,
    as_json: bool,
) -> None:
    """Per team, from the ledger: runs running (an open reservation and a live heartbeat),
    admitted (an open reservation, not seen running), and the last day's refused and settled
    runs, with each run's reservation and settlement."""
    if ctx.invoked_subcommand is not None:
        return
    from burst.admission.views import queue_view
    from burst.runs import runs_root as default_root

    view = queue_view(
        open_ledger(ledger_url), (runs_root or default_root()).resolve(), list(teams) or None
    )
    if as_json:
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    click.echo(f"ledger {view['ledger']}")
    if not view["teams"]:
        click.echo("no teams: no budgets set and no runs recorded")
    for team, rows in view["teams"].items():
        counts = ", ".join(f"{k} {len(v)}" for k, v in rows.items())
        click.echo(f"team {team}: {counts}")
        for state, items in rows.items():
            for r in items:
                line = (
                    f"  {state:<8} {r['run_id']}  {r['priority']:<8} {_when(r['at'])}  "
                    f"reserved ${r['reserved_usd']:,.2f} ({r['reserved_gpu_hours']:,.1f} GPU-h)"
                )
                if r.get("requeues"):
                    line += f", {r['requeues']} requeue(s)"
                if state == "settled":
                    line += f"; actual ${float(r['actual_usd'] or 0):,.2f}"
                click.echo(line)
