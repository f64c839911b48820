"""burst resume RUN: carry on a run that stopped (its runner killed, the machine rebooted, a
CI job cancelled) from its newest committed checkpoint, bit-identical to an uninterrupted run."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("resume")
@click.argument("run_id", metavar="RUN")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories are (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Catalog file overriding the defaults, as `burst run --catalog` (repeatable).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the report on stdout (as burst run).")
@click.pass_context
def command(
    ctx: click.Context,
    run_id: str,
    runs_root: Path | None,
    catalogs: tuple[Path, ...],
    as_json: bool,
) -> None:
    """Resume run RUN with the spec it started with (runs/RUN/spec.yaml).

    The same as `burst run runs/RUN/spec.yaml --run-id RUN --runs-root ROOT`: provision
    again, train from the newest committed checkpoint, teardown, report; it prints and exits
    as `burst run` does (docs/reference/endings.md). Refused (exit 3, one line naming the
    holder) while the run is live: a process of it still runs here, its driver heartbeat or
    its trainer lease is still renewed. A holder that stopped renewing lapses after
    BURST_LEASE_TTL_S (180 s); one on this machine whose process is gone at once. A run that
    succeeded has nothing to resume (its ending's next command is none): refused, exit 3,
    before anything is provisioned.
    """
    from burst.cli.commands.run import command as run_command
    from burst.errors import BadInputError
    from burst.infra.reaper import live_run_ids
    from burst.lease import LeaseHeld
    from burst.runs import check_run_id, run_paths
    from burst.runs import runs_root as default_root

    rid = check_run_id(run_id)
    paths = run_paths(rid, runs_root.resolve() if runs_root else default_root())
    if not paths.spec.is_file():
        raise BadInputError(
            f"run {rid}: no spec at {paths.spec} (not a run of this runs root; see --runs-root)"
        )
    if rid in live_run_ids():
        raise LeaseHeld(f"run {rid} is live: a process of it still runs on this machine")
    _refuse_a_succeeded_run(paths.dir, rid)
    ctx.invoke(
        run_command,
        spec=paths.spec,
        run_id=rid,
        runs_root=paths.root,
        catalogs=catalogs,
        as_json=as_json,
    )


def _refuse_a_succeeded_run(run_dir: Path, rid: str) -> None:
    """Resuming a run that succeeded would rent its nodes again to train no step: refused."""
    from burst.endings import Ending
    from burst.errors import PolicyRefusal
    from burst.obs.run_view import load_run

    if not (run_dir / "report.json").is_file():
        return
    view = load_run(run_dir)
    if view.status == Ending.SUCCEEDED:
        step = view.report.final_step if view.report is not None else None
        at = "" if step is None else f" (it trained to step {step})"
        raise PolicyRefusal(
            f"run {rid} succeeded{at}: nothing to resume, nothing provisioned; "
            "`burst run SPEC` starts a new run"
        )
