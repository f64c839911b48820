"""burst status NAME: follow a run submitted to Argo."""

from __future__ import annotations

import click

from burst.runner.follow import DEFAULT_MAX_OUTAGE_S

TOKEN_COMMAND_HELP = (
    "Command printing a fresh Argo bearer token, run when the server refuses the current one "
    "(e.g. 'aws eks get-token --cluster-name C --query status.token --output text')."
)


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
@click.option("--token-command", help=TOKEN_COMMAND_HELP)
@click.option(
    "--max-outage",
    type=click.FloatRange(min=0),
    default=DEFAULT_MAX_OUTAGE_S,
    show_default=True,
    help="Seconds an unreachable Argo server is ridden out before giving up following.",
)
def command(
    name: str,
    namespace: str | None,
    follow: bool,
    interval: float,
    token_command: str | None,
    max_outage: float,
) -> None:
    """Show the phase of workflow NAME and its steps; with --follow, until it finishes.

    Exits 0 when the workflow succeeded (or is still running with --no-follow), 1 when it
    failed or errored, 4 when it could not be followed to its end (the server stayed
    unreachable, or refused every token): the workflow may still be running. Server and
    token from ARGO_SERVER / ARGO_TOKEN; an expired token is renewed with --token-command.
    """
    from burst.runner.argo import WorkflowState, settings_from_env
    from burst.runner.follow import Follower, TokenSource

    follower = Follower(
        name,
        settings_from_env(namespace),
        TokenSource(token_command),
        max_outage_s=max_outage if follow else 0.0,  # one look: no retries
        interval_s=interval,
    )
    seen: dict[str, str] = {}
    shown = {"phase": ""}

    def show(state: WorkflowState) -> None:
        if state.phase != shown["phase"]:
            shown["phase"] = state.phase
            click.echo(f"{state.name}: {state.phase} {state.progress}".rstrip())
        for node in state.nodes:
            key = f"{node['name']}:{node['type']}"
            if seen.get(key) != node["phase"]:
                seen[key] = node["phase"]
                code = "" if node["exit_code"] is None else f" exit {node['exit_code']}"
                msg = f" ({node['message']})" if node["message"] else ""
                click.echo(f"  {node['name']}: {node['phase']}{code}{msg}")

    if follow:
        state = follower.follow(show)
    else:
        state = follower.state()
        show(state)
    if state.message and state.finished:
        click.echo(f"message: {state.message}")
    raise SystemExit(0 if state.phase in ("Succeeded", "Running", "Pending") else 1)
