"""burst distill SPEC --run RUN: the serving tiers of a trained run (docs/inference.md)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("distill")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--run", "run_id", required=True, help="The run id whose final checkpoint is the teacher."
)
@click.option(
    "--student",
    metavar="MODULE:FUNC",
    help="Builds the student network from the spec (default: build_student in the "
    "entrypoint's module).",
)
@click.option(
    "--steps", type=click.IntRange(1), default=400, show_default=True, help="Distillation steps."
)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
def command(
    spec: Path, run_id: str, student: str | None, steps: int, runs_root: Path | None
) -> None:
    """Make the serving tiers of a trained run: the heavy model (the run's newest checkpoint),
    a distilled student trained on the heavy model's outputs on the run's data, and its int8
    dynamic quantization. Each is stored content-addressed in the run's store under tiers/,
    with its held-out loss, size and latency; tiers/index.json lists them."""
    from burst.inference.distill import distill
    from burst.spec import load_spec

    job = load_spec(spec)
    doc = distill(
        job,
        run_id,
        student=student,
        steps=steps,
        runs_root=runs_root.resolve() if runs_root else None,
    )
    click.echo(
        f"tiers of run {run_id} (teacher step {doc.teacher_step}, "
        f"{doc.heldout_samples} held-out samples):"
    )
    for t in doc.tiers:
        click.echo(
            f"  {t.name:<15} held-out loss {t.heldout_loss:.4f}  {t.size_bytes:>7} bytes  "
            f"{t.latency_ms_p50:.3f} ms/sample  {t.store}"
        )
