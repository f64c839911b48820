"""burst down RUN: destroy what a stopped local run left, now (not waiting for its expiry)."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("down")
@click.argument("run")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where local run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option("--json", "as_json", is_flag=True, help="Print what was destroyed as JSON.")
def command(run: str, runs_root: Path | None, as_json: bool) -> None:
    """Destroy the infrastructure a local run left (its Terraform state, and each region's of
    a regional run) now, as `burst reap --yes` does once the run has expired. Refused (exit 3)
    while the run is live (a process of it runs here, or its driver heartbeat is renewed):
    `burst cancel RUN` stops it and its own teardown runs. An Argo run is torn down by its
    workflow's exit handler (`burst cancel`) or, from CI, `burst finish`. Once nothing is
    left, the run's reservation in its team's ledger is settled to what it used (`burst
    budget`). Exit 4 when something could not be destroyed; the run then shows as reaped
    with what is left, and its reservation stays open.
    """
    from burst.cli.commands.reap import REAPED_FILE
    from burst.errors import EXIT_INFRA, BadInputError, PolicyRefusal
    from burst.infra.reaper import live_run_ids
    from burst.infra.teardown import destroy_run
    from burst.lease import alive, heartbeats, local_heartbeat_store
    from burst.obs.run_status import local_run_dir
    from burst.obs.run_view import load_run
    from burst.runs import runs_root as default_root
    from burst.runs import utcnow_iso, write_json_atomic

    root = runs_root.resolve() if runs_root else default_root()
    run_dir = local_run_dir(run, root)
    if run_dir is None:
        raise BadInputError(
            f"run {run!r} is not a local run under {root}: an Argo run is torn down by its "
            "workflow (burst cancel RUN) or by burst finish"
        )
    rid = run_dir.name
    if rid in live_run_ids() or alive(heartbeats(local_heartbeat_store(run_dir)).get("driver")):
        raise PolicyRefusal(
            f"run {rid} is live: `burst cancel {rid}` stops it and its teardown runs"
        )
    view = load_run(run_dir)  # a regional run's regions have workspaces of their own
    regions = view.regional.regions if view.regional is not None else []
    workdirs = [
        run_dir / "terraform",
        *(run_dir.parent / f"{rid}-{r}" / "terraform" for r in regions),
    ]
    done = []
    for workdir in workdirs:
        if workdir.is_dir():
            result = destroy_run(workdir)
            done.append({"workdir": str(workdir), **result.to_json()})
    left = sum(int(d["resources_remaining"]) for d in done)
    settled = None
    if not left:  # nothing bills any more: its reservation is settled (ending reaped)
        from burst.admission.steps import settle_reaped

        settled = settle_reaped(rid, root)
    write_json_atomic(
        run_dir / REAPED_FILE,
        {"reaped_at": utcnow_iso(), "action": "down", "resources_remaining": left},
    )
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_id": rid,
                    "destroyed": done,
                    "resources_remaining": left,
                    "settled": None if settled is None else settled.model_dump(mode="json"),
                }
            )
        )
    else:
        from burst.endings import Ending, hint

        for d in done:
            click.echo(f"{d['workdir']}: {d['resources_remaining']} resource(s) remaining")
        ended = load_run(run_dir).status  # a run that had ended keeps its ending
        click.echo(f"{rid}: down ({left} resource(s) remaining); {ended}")
        if settled is not None:
            click.echo(
                f"ledger: team {settled.team}'s reservation of ${settled.reserved_usd:,.2f} "
                f"settled at ${float(settled.actual_usd or 0):,.2f}"
            )
        if ended == Ending.REAPED:
            click.echo(f"next: {hint(Ending.REAPED, rid, root)}")
    if left:
        raise SystemExit(EXIT_INFRA)
