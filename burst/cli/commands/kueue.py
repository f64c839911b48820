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
    help="Only flavors of this provider (repeatable; default: every provider burst rents on). "
    "Kueue v0.17 and older need at most 16 flavors for a LocalQueue's status.",
)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write the files of deploy/kueue into this directory (default: print the objects).",
)
def command(
    catalogs: tuple[Path, ...], quota: Path | None, providers: tuple[str, ...], out: Path | None
) -> None:
    """Kueue ResourceFlavors for every GPU type x region x capacity type the catalog can rent
    (labels and tolerations of that provider's nodes), WorkloadPriorityClasses, the Cohort,
    and a ClusterQueue and LocalQueue per team (docs/queue.md "Kueue")."""
    from burst.admission.kueue_objects import (
        DEFAULT_QUOTA,
        kueue_objects,
        render,
        team_quotas,
        write,
    )
    from burst.plan.catalog import load_catalog

    objects = kueue_objects(
        load_catalog(catalogs), team_quotas(quota or DEFAULT_QUOTA), providers or None
    )
    files = render(objects)
    if out is None:
        click.echo("---\n".join(files[name] for name in files if name != "kustomization.yaml"))
        return
    for path in write(out, files):
        click.echo(f"wrote {path}")
