"""burst compile: render the Argo manifests (Hera definitions in burst/pipelines/) to YAML."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("compile")
@click.option(
    "--out",
    "out_dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("burst/pipelines/compiled"),
    show_default=True,
    help="Directory the manifests are written to.",
)
@click.option(
    "--check",
    is_flag=True,
    help="Write nothing; exit 1 when a file in --out differs from the definitions.",
)
def command(out_dir: Path, check: bool) -> None:
    """Compile burst/pipelines/*.py (Hera) into one YAML manifest each: burst-train and
    burst-regional (the WorkflowTemplates of a run and of a regional-sync run) and
    burst-reaper (the CronWorkflow).

    The files in burst/pipelines/compiled/ are committed goldens; `make goldens` rewrites them and
    the tests fail when they drift. Every manifest is linted before it is written.
    """
    from burst.errors import BadInputError
    from burst.outputs import write_output
    from burst.pipelines.build import manifest, render_all
    from burst.runner.lint import lint

    rendered = render_all()
    for filename in rendered:
        problems = lint(manifest(filename.removesuffix(".yaml")))
        if problems:
            raise BadInputError("; ".join(problems), where=f"pipelines: {filename}")
    drift = []
    for filename, text in rendered.items():
        target = out_dir / filename
        current = target.read_text(encoding="utf-8") if target.is_file() else None
        if current == text:
            click.echo(f"unchanged {target}")
            continue
        if check:
            drift.append(str(target))
            click.echo(f"differs   {target}")
            continue
        write_output(target, text, option="--out DIR")
        click.echo(f"wrote     {target}")
    if drift:
        click.echo(f"{len(drift)} manifest(s) differ: run `make goldens`", err=True)
        raise SystemExit(1)
