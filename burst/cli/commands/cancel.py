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
    here (nothing to stop: the line says how the run ended and what carries on, or on which
    machine its runner runs), 4 when Argo could not be asked.
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
            raise PolicyRefusal(_nothing_to_stop(run_dir, root, beat))
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


def _nothing_to_stop(run_dir: Path, root: Path, beat: dict[str, object] | None) -> str:
    """Why a local run cannot be stopped from here, in the words of its ending
    (docs/reference/endings.md): it ended (how, and the command that carries on), its runner
    is gone (lost: `burst down` destroys what it left), or it runs on another machine."""
    import socket

    from burst.endings import describe, ending_of, hint
    from burst.lease import alive
    from burst.obs.run_view import load_run

    rid = run_dir.name
    if beat is not None and alive(beat) and beat.get("host") != socket.gethostname():
        return (
            f"run {rid} has no live runner on this machine: its runner runs on "
            f"{beat.get('host')} (pid {beat.get('pid')}); run `burst cancel {rid}` there"
        )
    view = load_run(run_dir)
    ending = ending_of(view.status)
    if ending is None:
        return f"run {rid} has no live runner on this machine (heartbeat {run_dir / 'heartbeat'})"
    then = hint(ending, rid, root)
    return (
        f"run {rid} has no live runner on this machine, nothing to stop: it ended "
        f"{describe(ending, view.exit_code)}" + (f"; next: {then}" if then else "")
    )
