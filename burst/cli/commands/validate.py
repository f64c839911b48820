"""burst validate SPEC: check a job spec, one line per problem (exit 2), and, unless
``--offline``, what can be checked before renting: the packages the spec's engine and mode
import are installed here (``burst.installed``), the entrypoint builds (or the command
starts), the stores accept a write (exit 2 for the spec's mistakes and missing packages, 4 for
a store that does not answer)."""

from __future__ import annotations

import click

from burst.errors import EXIT_BAD_INPUT, EXIT_INFRA, BurstError, InfraError, SpecError


@click.command("validate")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=str))
@click.option(
    "--offline",
    is_flag=True,
    help="Check the spec only: do not build the entrypoint nor probe the checkpoint stores.",
)
def command(spec: str, offline: bool) -> None:
    """Check a job spec; print one line per problem (field path and YAML line), exit 2.

    Then, unless --offline, check before renting, in this Python environment: the packages
    the spec's engine and mode import are installed (torch; DeepSpeed for engine deepspeed,
    the [train] extra; the framework of an adapter a training.command script imports, the
    [frameworks] extra), the training entrypoint imports, builds on the spec and takes one
    batch (in a subprocess, within $BURST_ENTRYPOINT_CHECK_S, default 120 s) or the command
    starts, and the checkpoint store and replica store accept a write (within
    $BURST_STORE_CHECK_S, default 60 s). Exit 2 for a mistake in the spec or a missing
    package (the line names what to install), 4 for a store that does not answer or refuses
    the write.
    """
    from burst.spec import load_spec  # (pydantic: not on every burst command's start)

    try:
        job = load_spec(spec)
    except SpecError as exc:
        for problem in exc.problems:
            click.echo(problem, err=True)
        click.echo(f"burst: {len(exc.problems)} problem(s) in {spec}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    if not offline:
        from burst.installed import missing
        from burst.readiness import check_ready

        problems: list[BurstError] = list(missing(job))
        # without the packages the entrypoint cannot build: one line for that, not two
        problems += check_ready(job, entrypoint=not problems)
        if problems:
            for p in problems:
                click.echo(f"{spec}: {p.one_line()}", err=True)
            click.echo(f"burst: {len(problems)} problem(s) in {spec}", err=True)
            infra = any(isinstance(p, InfraError) for p in problems)
            raise SystemExit(EXIT_INFRA if infra else EXIT_BAD_INPUT)
    checked = (
        "spec only"
        if offline
        else "packages installed, "
        + ("command starts" if job.training.own_program else "entrypoint builds")
        + ", stores accept a write"
    )
    click.echo(f"{spec}: valid ({job.name}, spec sha256 {job.sha256()[:12]}; {checked})")
