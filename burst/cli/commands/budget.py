"""burst budget: each team's ledger (windows, reservations, settlements); --set writes the
budgets."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click


def ledger_option(f: Any) -> Any:
    return click.option(
        "--ledger",
        "ledger_url",
        metavar="URL",
        help="The ledger's object store (default $BURST_LEDGER, else <runs root>/ledger).",
    )(f)


def open_ledger(url: str | None) -> Any:
    from burst.admission.ledger import Ledger, ledger_url
    from burst.runs import runs_root

    return Ledger.open(url or ledger_url(runs_root()))


def _amount(x: float | None, unit: str) -> str:
    if x is None:
        return "no limit"
    # GPU-hours to the report's precision (burst report, the ledger line): one figure a run
    return f"${x:,.2f}" if unit == "usd" else f"{x:,.3f} GPU-hours"


def window_line(w: dict[str, Any]) -> str:
    parts = []
    for unit, used in (("usd", w["used_usd"]), ("gpu_hours", w["used_gpu_hours"])):
        limit = w[f"limit_{unit}"]
        text = f"used {_amount(used, unit)}"
        if limit is not None:
            text += f" of {_amount(limit, unit)}, {_amount(w[f'remaining_{unit}'], unit)} left"
        parts.append(text)
    o = w["override"]
    extra = ""
    if o:
        extra = f" (override{' ' + repr(o['reason']) if o.get('reason') else ''} until {o['end']})"
    return f"  {w['window']:<6} " + "; ".join(parts) + extra


@click.command("budget")
@ledger_option
@click.option("--team", "teams", multiple=True, help="Only this team (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print the ledger as JSON.")
@click.option(
    "--set",
    "set_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Write this teams file (budgets per window, dated overrides) to the ledger first.",
)
def command(
    ledger_url: str | None, teams: tuple[str, ...], as_json: bool, set_file: Path | None
) -> None:
    """Each team's ledger: GPU-hours and dollars used and left in the rolling day, week and
    month windows (with any dated override), open reservations, and settled runs' planned
    against actual cost. Budgets: a teams file (examples/teams.yaml) set with --set."""
    from burst.admission.views import budget_view

    ledger = open_ledger(ledger_url)
    if set_file is not None:
        ledger.set_teams(set_file.read_text(encoding="utf-8"), str(set_file))
    view = budget_view(ledger, list(teams) or None)
    if as_json:
        click.echo(json.dumps(view, indent=2, sort_keys=True))
        return
    click.echo(f"ledger {view['ledger']}")
    if not view["teams"]:
        click.echo("no teams: no budgets set and no runs recorded")
    for team, t in view["teams"].items():
        click.echo(f"team {team}" + ("" if t["budgeted"] else " (no budget: recorded only)"))
        for w in t["windows"]:
            click.echo(window_line(w))
        click.echo(
            f"  open reservations {t['open_reservations']} (${t['reserved_usd']:,.2f}, "
            f"{t['reserved_gpu_hours']:,.1f} GPU-hours); settled {t['settled_runs']} run(s): "
            f"planned ${t['settled_planned_usd']:,.2f}, actual ${t['settled_actual_usd']:,.2f} "
            f"({t['settled_actual_gpu_hours']:,.3f} GPU-hours); refused {t['refused']}"
        )
