"""burst plan SPEC: ranked candidates with expected cost, time, egress and checkpoint interval."""

from __future__ import annotations

import json
from pathlib import Path

import click


def _money(x: float) -> str:
    return f"${x:,.2f}" if x >= 0.01 or x == 0 else f"${x:.2g}"


def _hours(h: float) -> str:
    return f"{h:.2f}" if h >= 0.01 else f"{h:.2g}"


def _seconds(s: float) -> str:
    return f"{s:,.0f} s" if s >= 10 else f"{s:.3g} s"


@click.command("plan")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(path_type=Path),
    metavar="FILE",
    help="Catalog file overriding the defaults (repeatable; after "
    "$BURST_CATALOG, later files win).",
)
@click.option(
    "--decision",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Preflight decision record (JSON); without it verdicts are 'unchecked'.",
)
@click.option(
    "--objective",
    type=click.Choice(["cost", "time"]),
    default="cost",
    show_default=True,
    help="Rank by expected cost or by expected time.",
)
@click.option(
    "--seed",
    type=click.IntRange(0, 2**63 - 1),
    default=0,
    show_default=True,
    help="Seed of the pre-emption simulation.",
)
@click.option(
    "--replicas",
    type=click.IntRange(1, 1000),
    default=32,
    show_default=True,
    help="Simulated runs per candidate.",
)
@click.option(
    "--floor-nodes",
    type=click.IntRange(0, 4096),
    default=0,
    show_default=True,
    help="Also rank spot with an on-demand floor of N nodes (spot_with_fallback specs with "
    "more than N nodes).",
)
@click.option(
    "--shard",
    "shards",
    multiple=True,
    metavar="REGION=GB",
    help="The dataset is split over regions: GB of it stored in REGION (repeatable; replaces "
    "data.region/size_gb). Lets the plan choose training on regional shards.",
)
@click.option(
    "--sync-rounds",
    type=click.IntRange(1, 10**9),
    default=None,
    help="Model syncs of regional-shard training (default: one per checkpoint interval).",
)
@click.option(
    "--explain",
    is_flag=True,
    help="Also print the first candidate's expected cost term by term (GPU-hours x price, "
    "start-up, pre-emptions, node rounding, spot discount, egress, storage, ...; every "
    "candidate's are its cost_terms in --json) and evaluate the seeds' simple cost models on "
    "this run (data gravity, spot vs on-demand, total cost) beside burst's figures, naming "
    "each difference (with --json: under 'explain').",
)
@click.option("--json", "as_json", is_flag=True, help="Print the plan document as JSON.")
@click.option(
    "--chart",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="FILE",
    help="Write a cost-versus-time chart (PNG).",
)
def command(
    spec: Path,
    catalogs: tuple[Path, ...],
    decision: Path | None,
    objective: str,
    seed: int,
    replicas: int,
    floor_nodes: int,
    shards: tuple[str, ...],
    sync_rounds: int | None,
    explain: bool,
    as_json: bool,
    chart: Path | None,
) -> None:
    """Rank where to run SPEC: region, provider and capacity by expected cost and time.

    Exit 3 when the best expected cost exceeds budget.max_usd (nothing is rented) or the
    decision record is for another spec (spec_sha256), 2 on a bad spec, catalog or decision
    record.
    """
    from burst.plan.catalog import load_catalog
    from burst.plan.placement import PlanOptions, plan
    from burst.runs import load_doc
    from burst.spec import load_spec

    job = load_spec(spec)
    cat = load_catalog(catalogs)
    record = load_doc(str(decision), "decision record") if decision else None
    doc = plan(
        job,
        cat,
        record,
        PlanOptions(
            objective=objective,
            seed=seed,
            replicas=replicas,
            floor_nodes=floor_nodes,
            shards=_parse_shards(shards),
            sync_rounds=sync_rounds,
        ),
        decision_source=str(decision) if decision else "input decision",
    )
    if chart is not None:
        from burst.plan.chart import write_chart

        write_chart(doc, chart)
    checks = None
    if explain:
        from burst.plan.explain import explain as explain_plan

        checks = explain_plan(job, cat, doc)
    if as_json:
        if checks is not None:  # the plan document, and the explanation beside it
            from burst.admission.dispatch import dispatch_of

            out = {"plan": doc, "explain": [c.as_dict() for c in checks],
                   "dispatch": dispatch_of(doc).as_dict()}  # fmt: skip
            click.echo(json.dumps(out, indent=2, sort_keys=True))
        else:
            click.echo(json.dumps(doc, indent=2, sort_keys=True))
        return
    _print_table(doc)
    if checks is not None:
        from burst.admission.dispatch import dispatch_lines
        from burst.plan.explain import render, term_lines

        for line in [*term_lines(doc["candidates"][0]), *render(checks), *dispatch_lines(doc)]:
            click.echo(line)
    if chart is not None:
        click.echo(f"chart written to {chart}")


def _parse_shards(items: tuple[str, ...]) -> dict[str, float] | None:
    from burst.errors import BadInputError
    from burst.inputs import short
    from burst.spec import GB_MAX

    if not items:
        return None
    out: dict[str, float] = {}
    for item in items:
        region, sep, gb = item.partition("=")
        try:
            size = float(gb)
        except ValueError:
            size = -1.0
        if not sep or not region or not 0 <= size <= GB_MAX:
            raise BadInputError(
                f"--shard {short(item)}: expected REGION=GB with GB a number from 0 to {GB_MAX:g}"
            )
        if region in out:
            raise BadInputError(f"--shard: {region} is given twice")
        out[region] = size
    return out


def _print_table(doc: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    w = doc["workload"]
    table = Table(
        title=f"burst plan: {doc['gpu_count']} x {doc['gpu_type']}, budget "
        f"{_money(doc['budget_usd'])}, deadline {doc['deadline_hours']:g} h, "
        f"ranked by {doc['objective']}"
    )
    for col in (
        "#",
        "region",
        "provider",
        "capacity",
        "$/h",
        "exp. hours",
        "exp. cost",
        "egress",
        "ckpt interval",
        "verdict",
    ):
        table.add_column(
            col,
            justify="right"
            if col in ("#", "$/h", "exp. hours", "exp. cost", "egress", "ckpt interval")
            else "left",
        )
    for c in doc["candidates"]:
        price = _money(c["price_per_hour"]) + ("*" if c["price_basis"] != "catalog" else "")
        table.add_row(
            str(c["rank"]),
            c["region"],
            c["provider"],
            c["capacity"],
            price,
            _hours(c["expected_hours"]),
            _money(c["expected_cost_usd"]),
            _money(c["egress_usd"]),
            _seconds(c["checkpoint_interval_s"]),
            c["verdict"],
        )
    console = Console()
    if not console.is_terminal:  # pipes and CI logs: do not squeeze the table to 80 columns
        console = Console(width=160)
    console.print(table)
    console.print(
        f"training: {w['compute_hours']:.3g} h useful ({w['basis']}); checkpoint "
        f"{w['checkpoint_gb']:.3g} GB, blocking {w['checkpoint_cost_s']:.3g} s, "
        f"upload {w['upload_s']:.3g} s",
        highlight=False,
    )
    top = doc["candidates"][0] if doc["candidates"] else {}
    if top.get("memory_interval_s") is not None and top.get("store_every", 1) > 1:
        console.print(
            f"with memory tiers (#1): memory every {_seconds(top['memory_interval_s'])}, "
            f"store every {_seconds(top['store_interval_s'])} (1 save in "
            f"{top['store_every']}; docs/checkpoints.md#tiers)",
            highlight=False,
        )
    bases = {c["price_basis"] for c in doc["candidates"]}
    if bases & {"unknown", "spot-unknown"}:
        console.print(
            "* price not in the catalog for this capacity: conservative estimate "
            "(see price_source in --json)",
            highlight=False,
        )
    if "reference" in bases:
        first = next(c for c in doc["candidates"] if c["price_basis"] == "reference")
        console.print(
            f"* no offer prices {doc['gpu_type']}: {first['price_source']}; give your quote "
            "with --catalog FILE (docs/planning.md#the-catalog)",
            highlight=False,
        )
    partial = {
        f"{c['provider']}/{c['region']}": c["billing"]
        for c in doc["candidates"]
        if c.get("gpus_used") and c["gpus"] > c["gpus_used"]
    }
    for site, note in partial.items():  # billed GPUs the job does not use: never silent
        console.print(f"{site}: {note}", highlight=False)
    for e in doc["excluded"]:
        cap = f" {e['capacity']}" if e.get("capacity") else ""
        console.print(
            f"excluded {e['provider']}/{e['region']}{cap}: {e['reason']}", highlight=False
        )
    data = doc["data"]
    console.print(
        f"data strategy: {data['strategy']} ("
        + "; ".join(
            f"{o['strategy']}: "
            + (f"{_money(o['egress_usd'])} egress" if o["feasible"] else f"no: {o['reason']}")
            for o in data.get("alternatives", [])
        )
        + ")",
        highlight=False,
    )
    console.print(
        f"topology: {doc['topology']['span']} ({doc['topology']['reason']})", highlight=False
    )
    if doc.get("regional"):
        for line in regional_lines(doc["regional"]):
            console.print(line, highlight=False)


def _gb(nbytes: float) -> str:
    gb = nbytes / 1e9
    return f"{gb:,.3g} GB" if gb < 100 else f"{gb:,.0f} GB"


def regional_lines(r: dict) -> list[str]:
    """The plan's regional-sync section in words (docs/regional.md "Planning")."""
    return [
        f"regional sync: {len(r['regions'])} regions, aggregator {r['aggregation_region']}; "
        f"H {r['local_steps']} ({r['local_steps_basis']})"
        + (
            f", adaptive from {r['first_local_steps']} doubling"
            if r.get("first_local_steps")
            else ""
        )
        + f", {r['rounds']} rounds, "
        f"{r['codec']} deltas of {_gb(r['delta_bytes'])}",
        *_schedule_lines(r),
        f"  per round: {_gb(r['bytes_per_round'])} across regions, "
        f"{_money(r['egress_usd_per_round'])} egress, sync {_seconds(r['sync_s_per_round'])} "
        "(upload + download)",
        f"  over the run: {_gb(r['bytes_over_run'])}, {_money(r['egress_usd_over_run'])} egress, "
        f"{_seconds(r['wall_s'])}; synchronous DP: {_gb(r['sync_dp_bytes'])}, "
        f"{_money(r['sync_dp_egress_usd'])}, {_seconds(r['sync_dp_wall_s'])}",
        f"  (bytes ratio {r['bytes_ratio']:.3g}, wall ratio {r['wall_ratio']:.3g})",
        *_quality_lines(r),
    ]


def _schedule_lines(r: dict) -> list[str]:
    """The round schedule, where it comes from and what it costs (issue 31)."""
    if r.get("schedule") is None:  # a plan document written before issue 31's schedule
        return []
    return [
        f"  rounds: {r['schedule']} inner steps ({r['rounds_basis']}); "
        f"{_gb(r['bytes_over_run'])} across regions over the run"
    ]


def _quality_lines(r: dict) -> list[str]:
    """The outer optimizer and the loss ratio the measured table expects (issue 31)."""
    if r.get("outer_lr") is None:  # a plan document written before issue 31
        return []
    expected = r.get("expected_loss_ratio")
    quality = (
        f"  expected held-out loss: {expected:.3f} x synchronous DP's at equal tokens "
        '(measured, docs/regional.md "Outer defaults")'
        + (
            f" for {_gb(r['bytes_over_run'])} across regions (bytes ratio {r['bytes_ratio']:.3g})"
            if r.get("schedule") is not None
            else ""
        )
        + (
            "; measured at constant H, not on this schedule's shorter first rounds"
            if r.get("first_local_steps") and r["first_local_steps"] < r["local_steps"]
            else ""
        )
        if expected is not None
        else "  expected held-out loss: not measured for this outer setting"
    )
    return [
        f"  outer {r['outer_optimizer']} lr {r['outer_lr']:g} momentum {r['outer_momentum']:g} "
        f"({r['outer_basis']})",
        quality,
    ]
