"""burst logs RUN: the logs of a run's steps, local or on Argo."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("logs")
@click.argument("run")
@click.option("--step", help="Only this step (a local step name; on Argo, part of the pod name).")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    help="Only the lines of this rank (a multi-rank step's JSON log lines name their rank; "
    "other lines are left out).",
)
@click.option("--follow", is_flag=True, help="Keep printing new lines until the run finishes.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between looks at a local run's logs with --follow.",
)
@click.option("--namespace", help="Argo namespace (default $ARGO_NAMESPACE or argo).")
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where local run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object a line: a step's JSON log record exactly as it wrote it (ts, level, "
    'msg, step, run_id, an event\'s fields), or {"step", "line"} for a line that is not one '
    "(a program's own output, a traceback).",
)
def command(
    run: str,
    step: str | None,
    rank: int | None,
    follow: bool,
    interval: float,
    namespace: str | None,
    runs_root: Path | None,
    as_json: bool,
) -> None:
    """Print the logs of RUN's steps, in the order they ran, each line prefixed by its step
    (--step: one step, unprefixed). Steps log JSON records; a person gets each as a line
    (time UTC, level, message), --json gets them as they were written. RUN is a local run (a
    run id under the runs root, or a run
    directory) or else the Argo workflow of that name (ARGO_SERVER, ARGO_TOKEN). Exit 2 when
    there is no such run or step, 4 when Argo could not be asked. --rank keeps one rank's
    lines (burst's JSON log lines of a multi-rank step name it; a program's own output does not).
    """
    import time

    from burst.obs.run_logs import (
        argo_log_lines,
        as_json_line,
        local_log_files,
        rank_of,
        read_new,
        readable,
    )
    from burst.obs.run_status import local_run_dir, local_status, not_found
    from burst.runs import runs_root as default_root
    from burst.settings import current

    def emit(name: str, line: str) -> None:
        if rank is not None and rank_of(line) != rank:
            return
        if as_json:
            click.echo(as_json_line(name, line))
        else:
            click.echo(readable(line, None if step is not None else name))

    root = runs_root.resolve() if runs_root else default_root()
    run_dir = local_run_dir(run, root)
    if run_dir is None:
        if not current().argo_server:
            raise not_found(run, root)
        from burst.runner.argo import settings_from_env

        for pod, line in argo_log_lines(settings_from_env(namespace), run, step, follow):
            emit(pod, line)
        return
    offsets: dict[Path, int] = {}
    while True:
        st = local_status(run_dir)
        # a run nobody drives any more (its runner died) never finishes: stop following it
        finished = st.finished or not follow or not _driven(run_dir)
        for name, path in local_log_files(run_dir, step):
            lines, offsets[path] = read_new(path, offsets.get(path, 0))
            for line in lines:
                emit(name, line)
        if finished:
            return
        time.sleep(interval)


def _driven(run_dir: Path) -> bool:
    """A live runner renews the run's driver heartbeat."""
    from burst.lease import alive, heartbeats, local_heartbeat_store

    if not (run_dir / "heartbeat").is_dir():
        return False
    return alive(heartbeats(local_heartbeat_store(run_dir)).get("driver"))
