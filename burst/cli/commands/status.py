"""burst status RUN: one run's state, local (``burst run``) or on Argo (``burst submit``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import click

from burst.endings import Ending
from burst.runner import DEFAULT_MAX_OUTAGE_S

if TYPE_CHECKING:
    from burst.obs.run_status import RunStatus
    from burst.runner.argo import ArgoSettings

TOKEN_COMMAND_HELP = (
    "Command printing a fresh Argo bearer token, run when the server refuses the current one "
    "(e.g. 'aws eks get-token --cluster-name C --query status.token --output text'); it "
    "also gives the first token when ARGO_TOKEN is not set."
)


def argo_settings(namespace: str | None, token_command: str | None) -> ArgoSettings:
    """The Argo settings from the environment. With ``--token-command`` and no ARGO_TOKEN, the
    first token comes from the command: the end of a CI job runs in a fresh shell (GitLab's
    after_script, a later job), where a token exported by the job's script is gone, and a
    cancelled job must still reach Argo to stop its workflow."""
    from burst.runner.argo import settings_from_env
    from burst.runner.follow import TokenSource
    from burst.settings import current, use

    env = current()
    if token_command and not env.argo_token and env.argo_server:
        with use(env.replace(ARGO_TOKEN=TokenSource(token_command).refresh())):
            return settings_from_env(namespace)
    return settings_from_env(namespace)


@click.command("status")
@click.argument("run")
@click.option("--namespace", help="Argo namespace (default $ARGO_NAMESPACE or argo).")
@click.option(
    "--follow/--no-follow",
    default=False,
    show_default=True,
    help="Watch until the run finishes (default: look once).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
@click.option("--token-command", help=TOKEN_COMMAND_HELP)
@click.option(
    "--max-outage",
    type=click.FloatRange(min=0),
    default=DEFAULT_MAX_OUTAGE_S,
    show_default=True,
    help="With --follow: seconds an unreachable Argo server is ridden out before giving up "
    "(without --follow: one try, each call bounded by a 10 s connect / 30 s read timeout).",
)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where local run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON (one object).")
def command(
    run: str,
    namespace: str | None,
    follow: bool,
    interval: float,
    token_command: str | None,
    max_outage: float,
    runs_root: Path | None,
    as_json: bool,
) -> None:
    """Show the state of RUN and its steps: a local run (a run id under the runs root, or a
    run directory) or, when there is none, the Argo workflow of that name (ARGO_SERVER,
    ARGO_TOKEN from the environment; --token-command renews an expired token).

    A step is succeeded only with exit code 0 and running only while the run's driver
    renews its heartbeat; a run whose driver is gone without a report is lost. A run that
    ended shows how (docs/reference/endings.md: succeeded, failed, preempted, cancelled,
    budget-stopped, lost, reaped), its exit code and the command that carries on. A local
    run also lists its train attempts: what ended each (recovery_source: preemption,
    control_plane, node_loss, failure, cancel) and the recovery budget it spent
    (docs/preemption.md; --json: "recoveries").

    Looks once by default; --follow watches until the run ends. Exits 0 when the run
    succeeded or is still running, 1 when it ended any other way or nothing tells how it
    stands (unknown), 2 when there is no such run, 4 when Argo could not be asked
    (unreachable, or refused every token): the run may still be running.
    """
    import time

    from burst.obs.run_status import (
        argo_status,
        local_run_dir,
        local_status,
        not_found,
    )
    from burst.runs import runs_root as default_root
    from burst.settings import current

    root = runs_root.resolve() if runs_root else default_root()
    seen: dict[str, str] = {}
    shown = {"status": ""}

    def show(st: RunStatus) -> None:
        if as_json:
            return
        head = st.phase or st.status
        if head != shown["status"]:
            shown["status"] = head
            click.echo(f"{st.run_id}: {head} {st.progress or ''}".rstrip())
        for step in st.steps:
            key = step["name"]
            if seen.get(key) != step["status"]:
                seen[key] = step["status"]
                code = "" if step["exit_code"] is None else f" exit {step['exit_code']}"
                msg = f" ({step['message']})" if step["message"] else ""
                phase = step["status"] if st.mode == "local" else _argo_word(step["status"])
                click.echo(f"  {step['name']}: {phase}{code}{msg}")

    run_dir = local_run_dir(run, root)
    if run_dir is not None:
        st = local_status(run_dir)
        show(st)
        # (unknown: no report, no step, no heartbeat: nothing that could change is there)
        while follow and not st.finished and st.status != "unknown":
            time.sleep(interval)
            st = local_status(run_dir)
            show(st)
    else:
        if not current().argo_server:
            raise not_found(run, root)
        from burst.runner.follow import Follower, TokenSource

        follower = Follower(
            run,
            argo_settings(namespace, token_command),
            TokenSource(token_command),
            max_outage_s=max_outage if follow else 0.0,  # one look: no retries
            interval_s=interval,
        )
        if follow:
            st = argo_status(follower.follow(lambda s: show(argo_status(s))))
        else:
            st = argo_status(follower.state())
            show(st)
    recoveries = _recoveries(run_dir, st.ending) if run_dir is not None else []
    if as_json:
        out = st.as_dict()
        if recoveries:
            out["recoveries"] = recoveries
        click.echo(json.dumps(out, indent=2, sort_keys=True))
        raise SystemExit(_exit_code(st))
    for r in recoveries:
        step = "" if r["ended_at_step"] is None else f" at step {r['ended_at_step']}"
        # what ended it, when something did (an attempt that finished names nothing)
        source = f", ended by {r['recovery_source']}" if r["recovery_source"] else ""
        spent = f" (spends {r['budget']})" if r["budget"] else ""
        click.echo(f"  train attempt {r['attempt']}: {r['outcome']}{step}{source}{spent}")
    if st.ending is not None:
        from burst.endings import describe

        click.echo(describe(st.ending, st.exit_code))
        if st.message:
            click.echo(f"message: {st.message}")
        hint = (st.ending_json() or {}).get("hint")
        if hint:
            click.echo(f"next: {hint}")
    raise SystemExit(_exit_code(st))


def _exit_code(st: RunStatus) -> int:
    """0 for a run that succeeded or is running; 1 for any other ending, and for a run nothing
    tells the state of (``unknown``): a script's `burst status RUN && ...` never goes on
    from a run it cannot vouch for."""
    if st.ending is None:
        return 0 if st.status == "running" else 1
    return 0 if st.ending == Ending.SUCCEEDED else 1


def _recoveries(run_dir: Path, ending: object) -> list[dict[str, object]]:
    """A local run's train attempts and what ended each (``recovery_source``)."""
    from burst.attempt_records import FILE_NAME, read_file, recoveries

    return recoveries(read_file(run_dir / FILE_NAME), cancelled=ending == Ending.CANCELLED)


def _argo_word(status: str) -> str:
    """Argo's own phase words for its nodes (Succeeded, Failed, Running)."""
    return {"succeeded": "Succeeded", "failed": "Failed", "running": "Running"}.get(
        status, status.capitalize()
    )
