"""burst status NAME: follow a run submitted to Argo."""

from __future__ import annotations

import time

import click


@click.command("status")
@click.argument("name")
@click.option("--namespace", help="Namespace (default $ARGO_NAMESPACE or argo).")
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Poll until the workflow finishes.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between polls.",
)
def command(name: str, namespace: str | None, follow: bool, interval: float) -> None:
    """Show the phase of workflow NAME and its steps; with --follow, until it finishes.

    Exits 0 when the workflow succeeded (or is still running with --no-follow), 1 when it
    failed or errored. Server and token from ARGO_SERVER / ARGO_TOKEN.
    """
    from burst.runner.argo import settings_from_env, status

    settings = settings_from_env(namespace)
    seen: dict[str, str] = {}
    phase = ""
    while True:
        state = status(name, settings)
        if state.phase != phase:
            phase = state.phase
            click.echo(f"{state.name}: {phase} {state.progress}".rstrip())
        for node in state.nodes:
            key = f"{node['name']}:{node['type']}"
            if seen.get(key) != node["phase"]:
                seen[key] = node["phase"]
                code = "" if node["exit_code"] is None else f" exit {node['exit_code']}"
                msg = f" ({node['message']})" if node["message"] else ""
                click.echo(f"  {node['name']}: {node['phase']}{code}{msg}")
        if state.finished or not follow:
            break
        time.sleep(interval)
    if state.message and state.finished:
        click.echo(f"message: {state.message}")
    raise SystemExit(0 if phase in ("Succeeded", "Running", "Pending") else 1)
