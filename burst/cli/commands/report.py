"""burst report RUN: what a run did, at a glance (text, JSON, or a self-contained HTML page)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("report")
@click.argument("run")
@click.option(
    "--html",
    "html_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write a self-contained HTML page (timeline and cost chart) here.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
def command(run: str, html_file: Path | None, as_json: bool, runs_root: Path | None) -> None:
    """Summarise RUN (a run id or a run directory): status, wall time per step, GPU hours,
    cost against budget, preemptions, checkpoints, egress and leaks."""
    from burst.obs.report_html import render_html
    from burst.obs.report_text import render_text
    from burst.obs.run_view import load_run, resolve_run_dir

    view = load_run(resolve_run_dir(run, runs_root.resolve() if runs_root else None))
    if html_file is not None:
        from burst.outputs import write_output

        write_output(html_file, render_html(view), option="--html FILE")
    if as_json:
        click.echo(json.dumps(view.summary(), indent=2, sort_keys=True, default=str))
    else:
        click.echo(render_text(view), nl=False)
        if html_file is not None:
            click.echo(f"html report: {html_file}")
