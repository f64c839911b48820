"""burst cancel RUN: stop a run, local or on Argo; its teardown still runs."""

from __future__ import annotations

import json
from pathlib import Path

import click

from burst.cli.commands.status import TOKEN_COMMAND_HELP, argo_settings


@click.command("cancel")
@click.argument("run")
@click.option("--namespace", help="Argo namespace (default $ARGO_NAMESPACE or argo).")
@click.option("--token-command", help=TOKEN_COMMAND_HELP)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where local run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was done as JSON.")
def command(
    run: str,
    namespace: str | None,
    token_command: str | None,
    runs_root: Path | None,
    as_json: bool,
) -> None:
    """Stop RUN as `argo stop` does: no further step starts, the running one is stopped and
    the teardown runs. A local run (a run id under the runs root, or a run directory): its
    live runner on this machine gets SIGTERM. Otherwise the Argo workflow of that name is
    stopped (ARGO_SERVER, ARGO_TOKEN from the environment). Watch the teardown with
    `burst status RUN --follow`.

    The run then ends cancelled: `burst run` exits 130 and prints the `burst resume` line,
    as after Ctrl-C (docs/reference/endings.md).

    Exits 0 when asked, 2 when there is no such run, 3 when a local run has no live runner
    here (nothing to stop: `burst reap` cleans what a dead one left), 4 when Argo could not
    be asked.
    """
    import os
    import signal
    import socket

    from burst.errors import PolicyRefusal
    from burst.lease import alive, heartbeats, local_heartbeat_store
    from burst.obs.run_status import local_run_dir, not_found
    from burst.runs import runs_root as default_root
    from burst.settings import current

    root = runs_root.resolve() if runs_root else default_root()
    run_dir = local_run_dir(run, root)
    if run_dir is not None:
        beat = heartbeats(local_heartbeat_store(run_dir)).get("driver")
        if not alive(beat) or beat is None or beat.get("host") != socket.gethostname():
            raise PolicyRefusal(
                f"run {run_dir.name} has no live runner on this machine (heartbeat "
                f"{run_dir / 'heartbeat'}): nothing to stop; `burst reap` destroys what a "
                "dead runner left"
            )
        pid = int(beat["pid"])
        from burst.train.attempts import CANCEL_MARKER

        # the attempt this stop ends is a cancel, not a preemption (burst.recovery)
        (run_dir / CANCEL_MARKER).touch()
        os.kill(pid, signal.SIGTERM)  # the runner stops like `argo stop`: teardown runs
        done = {"run_id": run_dir.name, "mode": "local", "action": "stop", "pid": pid}
    else:
        if not current().argo_server:
            raise not_found(run, root)
        import dataclasses

        from burst.endings import cancel_message
        from burst.runner.argo import ArgoUnauthorized, stop
        from burst.runner.follow import TokenSource

        settings = argo_settings(namespace, token_command)
        message = cancel_message("`burst cancel`")
        try:
            stop(run, settings, message)
        except ArgoUnauthorized:
            if not token_command:
                raise
            fresh = dataclasses.replace(settings, token=TokenSource(token_command).refresh())
            stop(run, fresh, message)
        done = {"run_id": run, "mode": "argo", "action": "stop", "pid": None}
    if as_json:
        click.echo(json.dumps(done, indent=2, sort_keys=True))
    else:
        where = f" --runs-root {root}" if done["mode"] == "local" else ""
        click.echo(
            f"{done['run_id']}: stopping ({done['mode']}); the teardown runs, then it ends "
            f"cancelled: `burst status {done['run_id']}{where} --follow` to watch"
        )
