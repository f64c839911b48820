"""burst validate SPEC: check a job spec, one line per problem (exit 2)."""

from __future__ import annotations

import click

from burst.errors import EXIT_BAD_INPUT, SpecError
from burst.spec import load_spec


@click.command("validate")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=str))
def command(spec: str) -> None:
    """Check a job spec; print one line per problem (field path and YAML line), exit 2."""
    try:
        job = load_spec(spec)
    except SpecError as exc:
        for problem in exc.problems:
            click.echo(problem, err=True)
        click.echo(f"burst: {len(exc.problems)} problem(s) in {spec}", err=True)
        raise SystemExit(EXIT_BAD_INPUT) from None
    click.echo(f"{spec}: valid ({job.name}, spec sha256 {job.sha256()[:12]})")
