"""burst schema: print the job spec's JSON Schema."""

from __future__ import annotations

import json

import click

from burst.spec import json_schema


@click.command("schema")
def command() -> None:
    """Print the JSON Schema of a job spec (for editors and CI)."""
    click.echo(json.dumps(json_schema(), indent=2))
