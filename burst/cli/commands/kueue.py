"""burst kueue: Kueue's objects for burst (flavors, priorities, cohort, queues), generated from
the catalog and the teams' GPU quota; deploy/kueue is their rendering (`make goldens`)."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("kueue")
@click.option(
    "--catalog",
    "catalogs",
    multiple=True,
    type=click.Path(dir_okay=False, path_type=Path),
    help="Catalog file overriding the default (repeatable; after $BURST_CATALOG).",
)
@click.option(
    "--quota",
    type=click.Path(dir_okay=False, path_type=Path),
    help="The teams' GPU quota ConfigMap (default: the checkout's deploy/gpu-quota.yaml).",
)
@click.option(
    "--provider",
    "providers",
    multiple=True,
    help="A provider the site rents on: its flavors go in every team's ClusterQueue "
    "(repeatable; default: every provider burst provisions on a cloud stack).",
)
@click.option(
    "--local-queue-status-64",
    is_flag=True,
    help="The site's Kueue has kubernetes-sigs/kueue#12082 (a LocalQueue's status lists up to "
    "64 flavors): allow more than 16 flavors, which Kueue v0.17.0 and older give no "
    "LocalQueue status.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the files of deploy/kueue into this directory (default: print the objects).",
)
def command(
    catalogs: tuple[Path, ...],
    quota: Path | None,
    providers: tuple[str, ...],
    local_queue_status_64: bool,
    out: Path | None,
) -> None:
    """Kueue ResourceFlavors for every GPU type x region x capacity type the catalog can rent
    on the site's providers (labels and tolerations of that provider's nodes),
    WorkloadPriorityClasses, the Cohort, and a ClusterQueue and LocalQueue per team
    (docs/queue.md "Kueue")."""
    from burst.admission.kueue_objects import (
        DEFAULT_QUOTA,
        kueue_objects,
        render,
        team_quotas,
        write,
    )
    from burst.plan.catalog import load_catalog

    objects = kueue_objects(
        load_catalog(catalogs),
        team_quotas(quota or DEFAULT_QUOTA),
        providers or None,
        local_queue_status_64=local_queue_status_64,
    )
    files = render(objects)
    if out is None:
        click.echo("---\n".join(files[name] for name in files if name != "kustomization.yaml"))
        return
    for path in write(out, files):
        click.echo(f"wrote {path}")
