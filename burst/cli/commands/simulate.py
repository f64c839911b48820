"""burst simulate: goodput of training under pre-emptions, and the Young/Daly interval."""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.command("simulate")
@click.option(
    "--mtbf",
    type=float,
    metavar="SECONDS",
    help="Mean time between pre-emptions (Poisson). Required unless --trace.",
)
@click.option(
    "--notice",
    type=float,
    default=0.0,
    show_default=True,
    metavar="SECONDS",
    help="Notice before each pre-emption (AWS spot 120, GCP/Azure 30).",
)
@click.option(
    "--checkpoint-cost",
    type=float,
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds training blocks for one checkpoint.",
)
@click.option(
    "--step-time",
    type=float,
    default=1.0,
    show_default=True,
    metavar="SECONDS",
    help="Seconds per training step.",
)
@click.option(
    "--upload-time",
    type=float,
    metavar="SECONDS",
    help="Background upload of one checkpoint [default: 40 x checkpoint cost: "
    "~20 GB/s host copy vs ~0.5 GB/s upload].",
)
@click.option(
    "--restart",
    type=float,
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Paid seconds from a replacement node's start to the first step.",
)
@click.option(
    "--work",
    type=float,
    metavar="SECONDS",
    help="Useful training seconds to simulate [default: 100 x MTBF].",
)
@click.option(
    "--interval",
    type=float,
    metavar="SECONDS",
    help="Checkpoint interval to simulate [default: Young/Daly].",
)
@click.option(
    "--trace",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Pre-emption times (seconds from the start, one a line, or a JSON list).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the Poisson runs.")
@click.option(
    "--replicas",
    type=click.IntRange(1, 10000),
    default=20,
    show_default=True,
    help="Poisson runs averaged.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Also write the JSON result to FILE.",
)
def command(
    mtbf: float | None,
    notice: float,
    checkpoint_cost: float,
    step_time: float,
    upload_time: float | None,
    restart: float,
    work: float | None,
    interval: float | None,
    trace: Path | None,
    seed: int,
    replicas: int,
    as_json: bool,
    out: Path | None,
) -> None:
    """Simulate pre-emptions (Poisson or a trace) and report goodput (useful / paid time),
    lost work, and goodput at the Young/Daly interval versus 1/4 and 4 times it."""
    import math

    from burst.errors import BadInputError
    from burst.inputs import MAX_INT
    from burst.outputs import write_json_output
    from burst.plan.goodput import SimParams, read_trace, young_daly_report

    if not 0 <= seed <= MAX_INT:
        raise BadInputError(f"--seed must be from 0 to {MAX_INT} (got {seed})")
    if mtbf is not None and not math.isfinite(mtbf):
        # inf would read as "no --mtbf" below (the trace's sentinel): name the option given
        raise BadInputError(
            f"--mtbf must be a finite number of seconds (got {mtbf!r}); "
            "for a run that is never pre-empted no interval is needed"
        )
    times = read_trace(trace) if trace else None
    if mtbf is None and times is None:
        raise BadInputError("give --mtbf SECONDS or --trace FILE")
    if interval is not None and interval <= 0:
        raise BadInputError("--interval must be > 0")
    params = SimParams(
        mtbf_s=mtbf if mtbf is not None else math.inf,
        notice_s=notice,
        checkpoint_cost_s=checkpoint_cost,
        step_s=step_time,
        upload_s=upload_time,
        restart_s=restart,
        work_s=work,
    )
    doc = young_daly_report(params, interval_s=interval, seed=seed, replicas=replicas, trace=times)
    if out is not None:
        write_json_output(out, doc, option="--out FILE")
    if as_json:
        click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    click.echo(
        f"goodput {doc['goodput']:.4f} at a {doc['interval_s']:.4g} s interval "
        f"({doc['arrivals']}, {doc['replicas']} run(s), "
        f"{doc['preemptions']:.3g} pre-emptions a run)"
    )
    click.echo(
        f"lost work {doc['lost_seconds']:.4g} s a run; checkpoint blocking "
        f"{doc['checkpoint_blocking_s']:.4g} s; upload waits {doc['upload_wait_s']:.4g} s;"
        f" restarts {doc['restart_s']:.4g} s; emergency saves {doc['emergency_saves']:.3g}"
    )
    click.echo(f"Young/Daly interval {doc['default_interval_s']:.4g} s ({doc['interval_reason']})")
    for c in doc["comparison"]:
        click.echo(
            f"  x{c['factor']:<5g} interval {c['interval_s']:>10.4g} s  goodput "
            f"{c['goodput']:.4f}  lost {c['lost_seconds']:.4g} s"
        )
    if doc.get("sample_factor", 1.0) > 1.0:
        click.echo(
            f"sampled: {doc['work_s']:.4g} s of work is too long to simulate event by event; "
            f"a window of 1/{doc['sample_factor']:.3g} of it was, figures scaled back up"
        )
    verdict = "peaks near" if doc["peak_near_young_daly"] else "does NOT peak near"
    click.echo(f"goodput {verdict} the Young/Daly interval")
