"""burst finish NAME: the end of a CI job that submitted a run; never destroys under it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click

from burst.cli.commands.status import TOKEN_COMMAND_HELP, argo_settings
from burst.errors import EXIT_INFRA


@click.command("finish")
@click.argument("name")
@click.option(
    "--spec",
    "spec",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The job spec (teardown reads its checkpoint store).",
)
@click.option("--namespace", help="Namespace (default $ARGO_NAMESPACE or argo).")
@click.option(
    "--cancelled/--not-cancelled",
    default=False,
    help="The CI job was cancelled: stop a running workflow (`argo stop`: its exit handler "
    "tears down).",
)
@click.option("--token-command", help=TOKEN_COMMAND_HELP)
@click.option(
    "--wait",
    "wait_s",
    type=click.FloatRange(min=0),
    default=1800.0,
    show_default=True,
    help="With --cancelled: seconds to wait for the stopped workflow to end (its exit handler "
    "tears down whether or not this waits; a CI job's end has little time after a cancel).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    default="teardown.json",
    show_default=True,
    help="Where the teardown document goes when this job tears down.",
)
def command(
    name: str,
    spec: Path,
    namespace: str | None,
    cancelled: bool,
    token_command: str | None,
    wait_s: float,
    out: Path,
) -> None:
    """Tear run NAME down from CI only when no workflow drives it any more.

    Asks Argo about workflow NAME. Finished (or never created): runs teardown (idempotent;
    the workflow's exit handler has already torn down) and exits with its code. Running and
    --cancelled: stops it as `argo stop` does, waits for its exit handler, exits 0. Running
    and not cancelled, or Argo cannot be asked: touches nothing and exits 4 (the workflow's
    deadline, its exit handler and the reaper remain).
    """
    from burst.runner.follow import Follower, TokenSource, finish

    follower = Follower(name, argo_settings(namespace, token_command), TokenSource(token_command))
    decision = finish(follower, cancelled=cancelled, wait_s=wait_s)
    click.echo(f"{name}: {decision}")
    if decision == "stopped":
        raise SystemExit(0)
    if decision == "leave":
        click.echo(
            f"burst: not tearing down {name}: its workflow may still be running "
            "(its exit handler and the reaper will)",
            err=True,
        )
        raise SystemExit(EXIT_INFRA)
    argv = [sys.executable, "-m", "burst.steps.teardown", "--spec", str(spec), "--run-id", name]
    raise SystemExit(subprocess.run([*argv, "--out", str(out)], check=False).returncode)
