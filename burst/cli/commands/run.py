"""burst run SPEC: run the whole pipeline on this machine on embedded defaults."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from burst.step_names import FAULT_POINTS, STEPS

if TYPE_CHECKING:
    from burst.runs import RunPaths


@click.command("run")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--run-id",
    help="Run id (default: <name>-<utc time>-<random>); one the runs root has is refused "
    "(`burst resume RUN` carries a run on).",
)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories go (default $BURST_RUNS_ROOT or ./runs).",
)
@click.option(
    "--fail-at",
    multiple=True,
    metavar="STEP",
    help="Inject a failure at STEP (repeatable; fault-injection harness): "
    + ", ".join(FAULT_POINTS)
    + ". teardown fails its first two destroy attempts; provision:midway fails after part "
    "of the stack exists.",
)
@click.option(
    "--preempt-at-step",
    "preempt_at",
    multiple=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="Send a real SIGTERM to the train process at step N "
    "(repeatable); the runner requeues it on exit 75 as Argo's retry policy does.",
)
@click.option(
    "--kill-runner-at",
    "kill_at",
    type=click.Choice(STEPS),
    help="Fault injection: SIGKILL this runner itself when STEP starts, so nothing "
    "in-process can clean up (teardown never runs; `burst reap` must catch it).",
)
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Catalog file overriding the defaults, as `burst plan --catalog` (repeatable; after "
    "$BURST_CATALOG, later files win): the run's plan step prices with it.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the run's report (report.json) on stdout at the end instead of the run id; "
    "progress stays on stderr.",
)
@click.option(
    "--template",
    "template",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Compiled WorkflowTemplate to execute (default: "
    "burst/pipelines/compiled/burst-train.yaml, the one Argo runs).",
)
@click.option(
    "--containers",
    is_flag=True,
    help="Run each step in the image its template names (docker, else podman) with what "
    "its pod gets: command and args, environment, user and group, dropped capabilities, no "
    "privilege escalation, read-only root where the template says so, the runs volume and "
    "/tmp, no network unless it reaches a store on this machine. The report names the image "
    "digest each step ran in. Images are never pulled (docs/images.md).",
)
@click.option(
    "--steps-image",
    metavar="REF",
    help="With --containers: the steps image (default $BURST_STEPS_IMAGE, else the one "
    "`make images` built).",
)
@click.option(
    "--trainer-image",
    metavar="REF",
    help="With --containers: the image train runs in (default $BURST_TRAINER_IMAGE, else the "
    "CPU trainer image `make images` built). Its digest must be the spec's image.reference "
    "digest (the one verify-image accepts), else the run is refused before anything is "
    "created (exit 3).",
)
@click.option(
    "--unverified-local-image",
    "unverified_local",
    is_flag=True,
    help="With --containers: run a trainer image whose digest is not the spec's signed one "
    '(a local development image); the report labels it "unverified local image" '
    "(docs/images.md).",
)
def command(
    spec: Path,
    run_id: str | None,
    runs_root: Path | None,
    fail_at: tuple[str, ...],
    preempt_at: tuple[int, ...],
    kill_at: str | None,
    catalogs: tuple[Path, ...],
    as_json: bool,
    template: Path | None,
    containers: bool = False,
    steps_image: str | None = None,
    trainer_image: str | None = None,
    unverified_local: bool = False,
) -> None:
    """Run preflight, plan, verify-image, provision, train and teardown (always) here.

    The local runner executes the compiled burst-train WorkflowTemplate (the same graph,
    retry policy, deadlines and exit handler Argo runs); each step runs as its own process
    (python -m burst.steps.<name>); the run directory runs/<run-id>/ keeps the step documents,
    logs, one directory per step attempt (pods/), Terraform state and report.json.
    Exits with the code of how the run ended (docs/reference/endings.md): 0 succeeded, the
    failing step's code when it failed, 75 preempted, 130 cancelled (burst cancel, Ctrl-C, a
    hang-up), 3 budget-stopped, 137 killed or lost. The run id is the only thing on stdout,
    printed as soon as the run exists (RUN=$(burst run SPEC) works; --json: the report at the
    end instead); progress and the summary (where it ran, the law, the image, the loss, the cost,
    and what to run next) go to stderr.
    A spec with training.strategy regional-sync runs the burst-regional template instead, by
    the same local runner: the preflight; per region a Terraform stack, an S3 server with keys
    of its own and burst-train's place branch (provision, train with the sync hook); the
    aggregate step in the aggregation region; the link emulator; teardown of every region
    (docs/regional.md); report.json is every run's, with its regional section; local_steps:
    null takes the planner's H; the fault options and --template are refused for it.
    --containers runs every step in its image instead of as a process here (docs/images.md).
    """
    from rich.table import Table

    from burst import faults
    from burst.errors import BadInputError
    from burst.runner.local import LocalRunner, RunOptions
    from burst.runs import check_run_id, new_run_id, run_paths
    from burst.runs import runs_root as default_root
    from burst.settings import current
    from burst.spec import load_spec

    current().check()  # a bad BURST_* variable fails here, before anything is created
    for point in fail_at:
        if point not in FAULT_POINTS:
            raise BadInputError(
                f"--fail-at {point!r}: not a fault point ({', '.join(FAULT_POINTS)})"
            )
    if (steps_image or trainer_image or unverified_local) and not containers:
        raise BadInputError(
            "--steps-image, --trainer-image and --unverified-local-image go with --containers"
        )
    job = load_spec(spec)
    catalog_env = _catalog_env(catalogs)
    launcher = (
        _container_launcher(job.image.reference, steps_image, trainer_image, unverified_local)
        if containers
        else None
    )
    if job.training.strategy == "regional-sync":
        from burst.settings import use

        with use(current().replace(BURST_CATALOG=catalog_env)):
            _run_regional(
                job, spec, run_id, runs_root, fail_at, preempt_at, kill_at, template, as_json,
                launcher,
            )  # fmt: skip
    late = sorted(n for n in set(preempt_at) if n >= job.training.steps)
    if late:
        raise BadInputError(
            f"--preempt-at-step {late[0]}: the spec trains {job.training.steps} steps; a "
            "preemption must come before the last one"
        )
    rid = check_run_id(run_id) if run_id else new_run_id(job.name)
    paths = run_paths(rid, runs_root.resolve() if runs_root else default_root())
    _refuse_a_taken_run_id(paths, spec)
    options = RunOptions(fail_at=fail_at, env=faults.arm(preempt_at_steps=preempt_at))
    if launcher is not None:
        options.containers, images = launcher
        options.parameters.update(images)
    if catalog_env is not None:
        options.env["BURST_CATALOG"] = catalog_env
    if template is not None:
        options.template = template
    # the template is read and checked (kind, features, parameters) before anything is created
    # (one runner: it parses the template once, for the check and the run)
    runner = LocalRunner(paths, spec, options)
    runner.check()
    try:
        paths.root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"runs root {paths.root}: cannot create it ({exc.strerror})") from None
    console = _stderr_console()
    console.print(f"[bold]burst run[/bold] {job.name}  run id [cyan]{rid}[/cyan]  ({paths.dir})")
    announced: list[bool] = []

    def announce() -> None:
        """The run id on stdout once the run exists (its driver's heartbeat and directory,
        which `burst status RUN` reads: printed earlier, a status asked at once found no
        run), before its first step."""
        if not announced:
            announced.append(True)
            _print_run_id(rid, as_json)

    def on_event(step: str, status: str, info: dict[str, Any]) -> None:
        announce()
        if status == "started" and step == kill_at:
            console.print(f"  [red]☠[/red] {step}: SIGKILL to the runner (--kill-runner-at)")
            faults.kill_runner(step, kill_at)
        if status == "started":
            console.print(f"  [dim]…[/dim] {step}")
        elif status == "requeued":
            console.print(
                f"  [yellow]↻[/yellow] {step} preempted, requeued (attempt {info.get('attempt')})"
            )
        elif status == "succeeded":
            console.print(f"  [green]✓[/green] {step} ({info.get('seconds', 0):.1f}s)")
        else:
            console.print(
                f"  [red]✗[/red] {step} exit {info.get('exit_code')} (log: {paths.log(step)})"
            )

    runner.on_event = on_event
    report = runner.run()
    announce()

    table = Table(title=f"run {rid}: {report['status']}", title_justify="left")
    table.add_column("step")
    table.add_column("status")
    table.add_column("exit", justify="right")
    table.add_column("seconds", justify="right")
    if launcher is not None:
        table.add_column("image (provenance)")
    for s in report["steps"]:
        exited = "-" if s.get("exit_code") is None else str(s["exit_code"])
        row = [s["name"], s["status"], exited, f"{s['seconds']:.2f}"]
        if launcher is not None:
            row.append(f"{s.get('image', '-')} ({s.get('image_provenance') or '-'})")
        table.add_row(*row)
    console.print(table)
    code = _summarise(console, paths, int(report["exit_code"]))
    _print_result(paths.report, as_json)
    raise SystemExit(code)


def _summarise(console: Any, paths: Any, code: int) -> int:
    """The end of a run on stderr (how it ended, where, the law, the image, the loss, the
    cost, what to run next: burst.obs.run_summary); returns the code to exit with (the
    ending's, burst.endings)."""
    from burst.obs.run_summary import summary_lines
    from burst.obs.run_view import load_run

    view = load_run(paths.dir)
    for line in summary_lines(view, paths.root):
        console.print(line, highlight=False, markup=False, soft_wrap=True)  # never cut
    code = view.exit_code if view.exit_code is not None else code
    return code if 0 <= code <= 255 else 1


def _stderr_console() -> Any:
    """Progress and the summary on stderr; outside a terminal (CI logs, pipes) lines are not
    wrapped at 80 columns."""
    from rich.console import Console

    console = Console(stderr=True)
    return console if console.is_terminal else Console(stderr=True, width=240)


def _refuse_a_taken_run_id(paths: RunPaths, spec: Path) -> None:
    """``--run-id`` naming a run this runs root already has, with another spec: the run's
    directory, checkpoints and ledger entry are that run's, and the new spec would resume
    its weights. Refused (exit 2). The run's own spec carries it on, as ``burst resume RUN``
    does and a CI job's next attempt (the same spec under the same id) does."""
    from burst.errors import BadInputError

    if not paths.spec.is_file() or spec.resolve() == paths.spec.resolve():
        return
    try:
        same = spec.read_bytes() == paths.spec.read_bytes()
    except OSError:
        same = False  # (the spec itself is read, and reported, by the run)
    if not same:
        raise BadInputError(
            f"--run-id {paths.run_id}: this runs root has a run of that id with another "
            f"spec ({paths.spec}); `burst resume {paths.run_id}` carries it on, another id "
            "starts a new run"
        )


def _print_run_id(run_id: str, as_json: bool) -> None:
    """stdout: the run id as soon as the run exists (for RUN=$(burst run SPEC), and for a
    person who wants to `burst status` it while it goes); with --json, nothing until the
    report."""
    if not as_json:
        click.echo(run_id)  # (flushed: a reader of the pipe has it at once)


def _print_result(report: Path, as_json: bool) -> None:
    """stdout at the end, with --json: the report."""
    if as_json and report.exists():
        click.echo(report.read_text().rstrip("\n"))


def _container_launcher(
    reference: str, steps_image: str | None, trainer_image: str | None, unverified_local: bool
) -> tuple[Any, dict[str, str]]:
    """Container mode: the engine found here, the steps image pinned, and the image train
    runs: the one of the spec's digest, or refused before anything is created (both checked
    to be in the store; burst.runner.containers.prepare)."""
    from burst.runner.containers import find_engine, prepare

    return prepare(
        find_engine(), reference, steps_image, trainer_image, unverified_local=unverified_local
    )


def _catalog_env(catalogs: tuple[Path, ...]) -> str | None:
    """``$BURST_CATALOG`` for the run's steps: the user's files and each ``--catalog``, as
    absolute paths (steps run in their own directories), after checking them here (one line,
    exit 2, before anything is created). None: nothing given, the environment stands."""
    import os

    from burst.plan.catalog import load_catalog
    from burst.settings import current

    if not catalogs:
        return None
    load_catalog(catalogs)  # every file checked now, not in the plan step
    files = [*current().catalog, *catalogs]
    return os.pathsep.join(str(Path(p).resolve()) for p in files)


def _run_regional(
    job: Any,
    spec: Path,
    run_id: str | None,
    runs_root: Path | None,
    fail_at: tuple[str, ...],
    preempt_at: tuple[int, ...],
    kill_at: str | None,
    template: Path | None,
    as_json: bool = False,
    launcher: tuple[Any, dict[str, str]] | None = None,
) -> None:
    """``strategy: regional-sync``: the regional graph on this machine (docs/regional.md)."""
    from rich.table import Table

    from burst.errors import BadInputError
    from burst.runner.regional import RegionalOptions, run_regional
    from burst.runs import check_run_id, new_run_id, run_paths
    from burst.runs import runs_root as default_root

    if fail_at or preempt_at or kill_at or template:
        raise BadInputError(
            "--fail-at, --preempt-at-step, --kill-runner-at and --template apply to the "
            "burst-train graph, not to a regional-sync spec"
        )
    rid = check_run_id(run_id) if run_id else new_run_id(job.name)
    paths = run_paths(rid, runs_root.resolve() if runs_root else default_root())
    _refuse_a_taken_run_id(paths, spec)
    try:
        paths.dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadInputError(f"runs root {paths.root}: cannot create it ({exc.strerror})") from None
    console = _stderr_console()
    console.print(
        f"[bold]burst run[/bold] {job.name} (regional-sync)  run id [cyan]{rid}[/cyan]  "
        f"({paths.dir})"
    )
    _print_run_id(rid, as_json)

    def on_event(step: str, status: str, info: dict[str, Any]) -> None:
        if step == "plan":
            console.print(f"  H = {info['local_steps']} local steps a round ({info['basis']})")
            return
        mark = {"started": "…", "succeeded": "✓", "requeued": "↻", "failed": "✗"}.get(status, "?")
        console.print(f"  {mark} {step} {status}")

    opts = RegionalOptions(on_event=on_event)
    if launcher is not None:
        containers, opts.parameters = launcher
        # the sites' files name this machine's paths under the run directory
        containers.host_paths = (paths.dir,)
        containers.store_env = ("BURST_REGION_SITE",)  # a region's pods reach its S3 server
        opts.containers = containers
    report = run_regional(job, spec, paths.dir, rid, opts)
    r = report.regional
    table = Table(title=f"run {rid}: {report.status}", title_justify="left")
    for col in ("round", "accepted", "dropped", "late", "delta bytes", "update bytes", "loss"):
        table.add_column(col)
    for x in r.rounds if r is not None else []:
        table.add_row(
            str(x.round),
            ",".join(x.accepted),
            ",".join(x.dropped) or "-",
            ",".join(x.late) or "-",
            str(x.delta_bytes),
            str(x.update_bytes),
            "-" if x.loss is None else f"{x.loss:.4f}",
        )
    console.print(table)
    if r is not None:
        links = r.links
        crossed = (
            "bytes crossing not measured"
            if links is None
            else f"bytes crossing {links.bytes_crossing} ({r.bytes_per_round:.0f} a round)  "
            f"egress ${links.egress_usd:.6f}  shard bytes crossing {links.shard_bytes_crossing}"
        )
        console.print(
            f"rounds {r.rounds_completed}/{r.rounds_planned if r.rounds_planned else '-'}  "
            f"{crossed}  torn down {','.join(r.torn_down)}"
        )
    if report.failure:
        console.print(f"[red]failed[/red]: {report.failure.step}: {report.failure.message}")
    fallback = report.exit_code or (0 if report.status == "succeeded" else 1)
    code = _summarise(console, paths, fallback)
    _print_result(paths.dir / "report.json", as_json)
    raise SystemExit(code)
