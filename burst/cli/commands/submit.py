"""burst submit SPEC: run the burst-train WorkflowTemplate on an Argo server."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("submit")
@click.argument("spec", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--namespace", help="Namespace (default $ARGO_NAMESPACE or argo).")
def command(spec: Path, namespace: str | None) -> None:
    """Submit SPEC as a Workflow calling the burst-train WorkflowTemplate (burst-regional for
    a training.strategy regional-sync spec); print its name.

    The server and token come from the environment only: ARGO_SERVER, ARGO_TOKEN
    (ARGO_NAMESPACE, ARGO_INSECURE_SKIP_VERIFY, BURST_STEPS_IMAGE optional). The spec's image
    must be a registry image pinned by digest. Follow the run with `burst status NAME`.
    """
    from burst.runner.argo import settings_from_env, submit

    settings = settings_from_env(namespace)
    click.echo(submit(spec, settings))
