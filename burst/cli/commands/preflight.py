"""burst preflight SPEC: the legal check of every candidate (region, provider).

Exit 0 when at least one candidate is allowed, 3 when none is, 2 on a bad spec or policy file.
"""

from __future__ import annotations

import datetime as dt
import json

import click

from burst.errors import EXIT_REFUSED

# --today: dates the fact ages and exception expiries can be reckoned from (year 1 overflowed)
TODAY_MIN = dt.date(1970, 1, 1)
TODAY_MAX = dt.date(2999, 12, 31)


SIGN_OFF_DOC = "docs/policy.md#how-a-compliance-officer-writes-one"
RULES_DOC = "docs/policy.md#the-rules"


def next_step(counts: dict[str, int]) -> str:
    """What would change a review or a deny, named (issue 29: refusals say the way on)."""
    steps = []
    if counts.get("review"):
        steps.append(
            "a review becomes allow only through a signed-off exception in "
            f"policies/exceptions/<id>.yaml bound to your organisation ({SIGN_OFF_DOC}; "
            "`burst policy explain RULE` shows a rule and its sources)"
        )
    if counts.get("deny"):
        steps.append(
            "a deny is never waived: choose other compute.regions / compute.providers, or "
            f"change the data that triggers it ({RULES_DOC})"
        )
    return "; ".join(steps) or "see `burst preflight SPEC --json`"


@click.command("preflight")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=str))
@click.option("--json", "as_json", is_flag=True, help="Print the decision record as JSON.")
@click.option(
    "--policies",
    "policy_dir",
    type=click.Path(file_okay=False, path_type=str),
    default=None,
    help="Policy directory (default: $BURST_POLICIES, else the repository's policies/).",
)
@click.option(
    "--max-fact-age-days",
    type=click.IntRange(min=1, max=3650),
    default=None,
    help="Facts verified longer ago never allow, 1 to 3650 (default: policies/settings.yaml).",
)
@click.option(
    "--today",
    type=click.DateTime(formats=["%Y-%m-%d"]),
    default=None,
    help="Evaluate as of this date (exception expiry, fact age), 1970-01-01 to 2999-12-31. "
    "Default: today (UTC).",
)
@click.option(
    "--out",
    type=click.Path(dir_okay=False, path_type=str),
    default=None,
    help="Also write the decision record to this file.",
)
def command(
    spec: str,
    as_json: bool,
    policy_dir: str | None,
    max_fact_age_days: int | None,
    today: dt.datetime | None,
    out: str | None,
) -> None:
    """Decide allow / review / deny for each candidate region and provider of SPEC."""
    from pathlib import Path

    from burst.outputs import write_json_output
    from burst.policy import evaluate, first_reason, load_policies
    from burst.spec import load_spec

    if today is not None and not TODAY_MIN <= today.date() <= TODAY_MAX:
        from burst.errors import BadInputError

        raise BadInputError(
            f"--today {today.date().isoformat()}: must be from {TODAY_MIN} to {TODAY_MAX}"
        )
    job = load_spec(spec)
    policies = load_policies(policy_dir)
    record = evaluate(
        job, policies, today=today.date() if today else None, max_fact_age_days=max_fact_age_days
    ).to_json()
    if out:
        write_json_output(Path(out), record, option="--out FILE")
    if as_json:
        click.echo(json.dumps(record, indent=2, sort_keys=True))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=f"preflight {job.name} (policies {record['policy_sha256'][:12]})")
        for col in ("region", "provider", "verdict", "first reason"):
            table.add_column(col, overflow="fold")
        colour = {"allow": "green", "review": "yellow", "deny": "red"}
        for d in record["decisions"]:
            v = d["verdict"]
            table.add_row(d["region"], d["provider"], f"[{colour[v]}]{v}[/]", first_reason(d))
        console = Console()  # outside a terminal (CI logs, pipes): no wrap at 80 columns
        Console(width=max(100, console.width) if console.is_terminal else 200).print(table)
        # a sign-off about a review reason that is bound to something else: say which and why
        notes = dict.fromkeys(
            f"{d['provider']}/{d['region']}: {r['message']}"
            for d in record["decisions"]
            for r in d["reasons"]
            if r["rule"] == "EXC-NOT-APPLICABLE"
        )
        for note in notes:
            click.echo(f"not applied: {note}")
        c = record["counts"]
        click.echo(
            f"{c['allow']} allowed, {c['review']} to review, {c['deny']} denied; "
            f"`burst preflight {spec} --json` shows every reason"
        )
        if c["review"] or c["deny"]:
            click.echo(f"next: {next_step(c)}")
    if not record["allowed"]:
        click.echo(
            f"burst preflight: no candidate of {spec} is allowed (exit {EXIT_REFUSED}): "
            + next_step(record["counts"]),
            err=True,
        )
        raise SystemExit(EXIT_REFUSED)
