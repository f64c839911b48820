"""burst serve SPEC --run RUN: the tiers and the router on loopback, under a load that ends."""

from __future__ import annotations

import json
from pathlib import Path

import click

from burst.inference.faults import FAULTS


@click.command("serve")
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--run", "run_id", required=True, help="The run whose tiers to serve (burst distill)."
)
@click.option(
    "--requests",
    type=click.IntRange(1),
    default=60,
    show_default=True,
    help="Requests the load generator sends.",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 64),
    default=4,
    show_default=True,
    help="Requests in flight at once.",
)
@click.option(
    "--fault",
    type=click.Choice(FAULTS),
    default="none",
    show_default=True,
    help="A fault to inject before the load.",
)
@click.option(
    "--json",
    "json_file",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the records and summary here.",
)
@click.option(
    "--engine",
    type=click.Choice(("loopback", "triton")),
    default="loopback",
    show_default=True,
    help="What serves the tiers: small HTTP servers in this process, or NVIDIA Triton "
    "(one process per tier; faults: none, killed, heavy region unreachable).",
)
@click.option(
    "--triton-python",
    type=click.Path(exists=True, dir_okay=False),
    help="With --engine triton: the Python of an environment with nvidia-pytriton and torch.",
)
@click.option(
    "--triton-path",
    multiple=True,
    type=click.Path(exists=True, file_okay=False),
    help="With --engine triton: a directory to add to that Python's import path (repeatable).",
)
@click.option(
    "--runs-root",
    type=click.Path(file_okay=False, path_type=Path),
    help="Where run directories live (default $BURST_RUNS_ROOT or ./runs).",
)
def command(
    spec: Path,
    run_id: str,
    requests: int,
    concurrency: int,
    fault: str,
    json_file: Path | None,
    engine: str,
    triton_python: str | None,
    triton_path: tuple[str, ...],
    runs_root: Path | None,
) -> None:
    """Serve a run's tiers on loopback: the int8 distilled model in the users' region
    (ap-southeast-1), the heavy model in the GPU region (me-central-1), the router in front
    (the routing policy, the preflight's rules for where each request may go, the link emulator
    adding each region's round trip), and a seeded load generator that stops after REQUESTS.
    Prints latency per path, the share of admitted requests that met their deadline, whether
    each request landed where the policy names under the fault, and residency breaches."""
    import tempfile
    from dataclasses import asdict

    from burst.errors import BadInputError
    from burst.inference.faults import TRITON_FAULTS
    from burst.spec import load_spec

    if engine == "triton":  # bad input first: nothing loaded, nothing started
        if triton_python is None:
            raise BadInputError(
                "--engine triton needs --triton-python PYTHON (nvidia-pytriton and torch)"
            )
        if fault not in TRITON_FAULTS:
            raise BadInputError(
                f"--fault {fault!r} needs --engine loopback (Triton: {', '.join(TRITON_FAULTS)})"
            )
    job = load_spec(spec)

    from burst.inference.serve import (
        DEFAULT_PLACEMENT,
        LoadSpec,
        TritonEngine,
        deployment,
        export_torchscript,
        run_scenario,
    )

    root = runs_root.resolve() if runs_root else None
    models, residency, emulator, load = deployment(
        job, run_id, runs_root=root, load_spec=LoadSpec(requests=requests)
    )
    with tempfile.TemporaryDirectory(prefix="burst-tiers-") as scratch:
        triton = None
        if engine == "triton":
            assert triton_python is not None
            exports = export_torchscript(models, Path(scratch))
            triton = TritonEngine(triton_python, exports, tuple(triton_path))
        sc = run_scenario(
            fault, models, DEFAULT_PLACEMENT, residency, emulator, load, concurrency, triton
        )
    click.echo(
        f"fault: {fault}; {sc.summary['requests']} requests, {sc.summary['refused']} refused"
    )
    for path, fig in sc.summary["latency_ms"].items():
        click.echo(
            f"  {path:<22} n={fig['n']:<4} p50 {fig['p50']:8.1f} ms  p99 {fig['p99']:8.1f} ms"
        )
    share = sc.summary["deadline_met_share_of_admitted"]
    click.echo(f"deadline met: {'-' if share is None else f'{share:.0%}'} of admitted requests")
    click.echo(
        f"landed where the policy names: {sc.matrix['landed_as_named']} of {sc.matrix['requests']}"
    )
    click.echo(f"residency breaches: {sc.breaches} of {len(sc.records)}")
    click.echo(
        "(emulated: the round trips between regions, seed 002's cross-continent link, "
        "and the tiers' compute time)"
    )
    if json_file is not None:
        from burst.outputs import write_output

        doc = {
            "fault": fault,
            "summary": sc.summary,
            "matrix": sc.matrix,
            "breaches": sc.breaches,
            "records": [asdict(r) for r in sc.records],
        }
        write_output(json_file, json.dumps(doc, indent=2, default=str), option="--json FILE")
