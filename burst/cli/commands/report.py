"""burst report RUN: what a run did, at a glance (text, JSON, or a self-contained HTML page)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from burst.cli.commands.status import TOKEN_COMMAND_HELP


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
@click.option(
    "--argo/--no-argo",
    "from_argo",
    default=None,
    help="Read RUN, a submitted workflow, from the Argo server ($ARGO_SERVER) into the runs "
    "root first (default: when RUN has no local directory and ARGO_SERVER is set).",
)
@click.option("--namespace", help="Argo namespace (default $ARGO_NAMESPACE or argo).")
@click.option("--token-command", help=TOKEN_COMMAND_HELP)
def command(
    run: str,
    html_file: Path | None,
    as_json: bool,
    runs_root: Path | None,
    from_argo: bool | None,
    namespace: str | None,
    token_command: str | None,
) -> None:
    """Summarise RUN (a run id or a run directory): status, wall time per step, GPU hours,
    cost against budget, preemptions, checkpoints, egress and leaks. A run submitted to Argo
    (burst submit, the CI templates) is read from the Argo server: each step's document from
    its pod's outputs, the checkpoint store's records as for a local run."""
    from burst.obs.report_html import render_html
    from burst.obs.report_text import render_text
    from burst.obs.run_view import load_run, resolve_run_dir
    from burst.runs import runs_root as default_root
    from burst.settings import current

    root = runs_root.resolve() if runs_root else None
    if from_argo is None:
        local = Path(run).is_dir() or ((root or default_root()) / run).is_dir()
        from_argo = not local and bool(current().argo_server)
    if from_argo:
        from burst.cli.commands.status import argo_settings
        from burst.runner.argo_report import materialize

        paths = materialize(run, argo_settings(namespace, token_command), root or default_root())
        run = str(paths.dir)
    view = load_run(resolve_run_dir(run, root))
    if html_file is not None:
        from burst.outputs import write_output

        write_output(html_file, render_html(view), option="--html FILE")
    if as_json:
        click.echo(json.dumps(view.summary(), indent=2, sort_keys=True, default=str))
    else:
        click.echo(render_text(view), nl=False)
        if html_file is not None:
            click.echo(f"html report: {html_file}")
