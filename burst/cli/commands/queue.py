"""burst queue: what is running, admitted, refused and settled per team; `burst queue
simulate` replays a trace against burst's admission policy and two baselines."""

from __future__ import annotations

import datetime as dt
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

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
    """Per team, from the ledger: runs queued (waiting for admission, renting nothing), running
    (an open reservation and a live heartbeat),
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


@command.command("simulate")
@click.option(
    "--trace",
    "trace_file",
    required=True,
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="The trace (YAML or JSON): flavors, teams, runs or a generate section, capacity "
    "windows (benchmarks/traces/queue-philly-style.yaml).",
)
@click.option("--seed", type=int, help="Seed of the trace's generated runs (default: its own).")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the report here as JSON (benchmarks/results/queue.json).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def simulate_command(trace_file: Path, seed: int | None, out: Path | None, as_json: bool) -> None:
    """Replay a trace of arrivals, priorities, spot losses and capacity windows against
    burst's policy (priorities, budgets, save-before-preempt) and two baselines (FIFO with a
    per-team semaphore; priority without budgets): inversions, overruns, GPU-hours lost,
    wait per band, utilisation. Deterministic for a trace and seed."""
    import yaml

    from burst.admission.simulate import load_trace, simulate
    from burst.errors import BadInputError

    try:
        doc = yaml.safe_load(trace_file.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise BadInputError(
            f"not YAML: {' '.join(str(exc).split())}", where=str(trace_file)
        ) from None
    if not isinstance(doc, dict):
        raise BadInputError("a trace is a mapping", where=str(trace_file))
    report = simulate(load_trace(doc, seed, str(trace_file)))
    report["trace"]["file"] = str(trace_file)
    text = json.dumps(report, indent=2, sort_keys=True)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text + "\n", encoding="utf-8")
    if as_json:
        click.echo(text)
        return
    click.echo(table(report))


def table(report: dict[str, Any]) -> str:
    """The policies side by side (the note's table)."""
    rows: list[tuple[str, Callable[[dict[str, Any]], str]]] = [
        ("completed", lambda r: str(r["completed"])),
        ("refused (GPU-h asked)", lambda r: f"{r['refused']} ({r['refused_gpu_hours']:,.0f})"),
        ("priority inversions", lambda r: str(r["priority_inversions"])),
        ("budget overruns (teams, $)", lambda r: f"{r['budget_overruns']}, "
         f"${r['budget_overrun_usd']:,.0f}"),
        ("GPU-h lost (all)", lambda r: f"{r['lost_gpu_hours']:,.1f}"),
        ("  to preemption", lambda r: f"{r['lost_gpu_hours_preemption']:,.1f}"),
        ("  to spot", lambda r: f"{r['lost_gpu_hours_spot']:,.1f}"),
        ("  emergency saves", lambda r: f"{r['emergency_save_gpu_hours']:,.1f}"),
        ("utilisation (raw)", lambda r: f"{100 * (r['utilisation'] or 0):.1f} %"),
        ("utilisation, fair (goal)", lambda r: _pct(r.get("utilisation_fair"))),
        ("useful GPU-h within budget",
         lambda r: f"{r.get('useful_gpu_hours_within_budget', 0):,.0f}"),
        ("utilisation while runs wait", lambda r: _pct(r["utilisation_while_runs_wait"])),
        ("useful GPU-h", lambda r: f"{r['useful_gpu_hours']:,.0f}"),
        ("makespan h", lambda r: f"{r['makespan_hours']:,.1f}"),
    ]  # fmt: skip
    for band in ("low", "normal", "high", "critical"):
        rows.append((f"wait {band}: mean / p95 h", functools.partial(_band_wait, band)))
    names = list(report["policies"])
    lines = [f"| metric | {' | '.join(names)} |", "|---" * (len(names) + 1) + "|"]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(fn(report["policies"][n]) for n in names) + " |")
    goals = ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in report["goals"].items())
    return "\n".join(lines) + f"\ngoals: {goals}"


def _band_wait(band: str, r: dict[str, Any]) -> str:
    return _wait(r["wait_hours"][band])


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f} %"


def _wait(w: dict[str, Any]) -> str:
    if w["mean"] is None:
        return "-"
    return f"{w['mean']:.2f} / {w['p95']:.2f}"
