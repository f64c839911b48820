"""burst schema: print the job spec's JSON Schema, or a step document's (``--document``)."""

from __future__ import annotations

import json

import click

# The names of burst.documents.DOCUMENTS, written out so that registering this command does not
# import every document model (tests/cli/test_cli_start.py keeps the two equal).
DOCUMENT_NAMES = (
    "decision-record",
    "plan",
    "verified-image",
    "provision",
    "train",
    "train-attempt",
    "teardown",
    "aggregate",
    "report",
)
DOCUMENT_HELP = "Print this step document's schema instead: " + ", ".join(DOCUMENT_NAMES) + "."


@click.command("schema")
@click.option(
    "--document",
    "document",
    metavar="NAME",
    is_flag=False,
    flag_value="",
    default=None,
    help=DOCUMENT_HELP,
)
def command(document: str | None) -> None:
    """Print the JSON Schema of a job spec, or of a step document (for editors and CI)."""
    if document is None:
        from burst.spec import json_schema

        click.echo(json.dumps(json_schema(), indent=2))
        return
    from burst.documents import json_schema as document_schema

    click.echo(json.dumps(document_schema(document), indent=2))
