"""Leak scans of GCP, Azure and Nebius: which API each asks for what a run left, and a
fail-closed answer when it cannot ask.

Nothing of these clouds can run here, so no scan below has met a real API in this project's
tests. What each would ask (the provider's own reference):

* GCP: Cloud Asset Inventory ``searchAllResources`` over ``projects/<project_id>`` with the
  query ``labels.burst-run-id="<label>"`` (the gcp-run stack carries ``burst:run-id`` as the
  label ``burst-run-id``, value lowercased, other characters as ``_``).
  https://cloud.google.com/asset-inventory/docs/reference/rest/v1/TopLevel/searchAllResources
* Azure: Resource Graph over the subscription, ``Resources`` and ``ResourceContainers`` whose
  tag ``burst:run-id`` is the run id.
  https://learn.microsoft.com/en-us/rest/api/azureresourcegraph/resourcegraph/resources/resources
* Nebius: no cross-service search by label is published; each service's ``List`` under the
  project (mk8s node groups of the cluster, compute instances and disks, storage buckets, IAM
  service accounts), matched on the label ``burst-run-id``. https://github.com/nebius/api

Every scan runs through a ``search`` callable returning the matching resources. The default one
uses the provider's SDK when it is installed (none is a dependency of burst); without it, without
the site facts the query needs (project, subscription), or on any error, the scan raises
``ScanUnverified`` and the caller records an ``unverified-scan`` leak: an unknown state is
never reported as clean.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.spec import TAG_RUN_ID

log = logging.getLogger(__name__)

SCANNED_PROVIDERS = ("gcp", "azure", "nebius")
UNVERIFIED = "unverified-scan"

# The label key the gcp-run and nebius-run stacks derive from the burst:run-id tag.
LABEL_KEY = "burst-run-id"


class ScanUnverified(Exception):
    """The scan could not be made or completed: what is left is unknown."""


@dataclass(frozen=True)
class ScanQuery:
    """One provider's question: where (``scope``) and what (``query``), in that API's words."""

    provider: str
    region: str
    api: str
    scope: str
    query: str


Search = Callable[[ScanQuery], Iterable[dict[str, Any]]]


def gcp_label(run_id: str) -> str:
    """The run id as the gcp-run stack writes it into a label value."""
    return re.sub(r"[^0-9A-Za-z_-]", "_", run_id).lower()[:63]


def nebius_label(run_id: str) -> str:
    """The run id as the nebius-run stack writes it into a label value."""
    return re.sub(r"[^0-9A-Za-z_.-]", "_", run_id)[:63]


def query_for(provider: str, region: str, run_id: str, site: dict[str, Any]) -> ScanQuery:
    """The question to ask ``provider`` about ``run_id``; ``site`` holds the site's variables
    (project_id, subscription_id, ...). A missing fact raises ``ScanUnverified``."""

    def need(name: str) -> str:
        value = site.get(name)
        if not isinstance(value, str) or not value:
            raise ScanUnverified(
                f"the site's variables have no {name} to scope the {provider} scan"
            )
        return value

    if provider == "gcp":
        return ScanQuery(
            provider,
            region,
            "cloudasset.v1.searchAllResources",
            f"projects/{need('project_id')}",
            f'labels.{LABEL_KEY}="{gcp_label(run_id)}"',
        )
    if provider == "azure":
        tag = TAG_RUN_ID.replace("'", "")
        rid = run_id.replace("'", "")
        return ScanQuery(
            provider,
            region,
            "Microsoft.ResourceGraph/resources",
            f"/subscriptions/{need('subscription_id')}",
            f"union Resources, ResourceContainers | where tags['{tag}'] == '{rid}' "
            "| project id, type, location, tags",
        )
    if provider == "nebius":
        return ScanQuery(
            provider,
            region,
            "nebius List (mk8s node groups, compute instances and disks, storage buckets, "
            "iam service accounts)",
            need("project_id"),
            f"labels.{LABEL_KEY} == {nebius_label(run_id)}",
        )
    raise ScanUnverified(f"no leak scan for provider {provider!r}")


def scan(
    provider: str,
    region: str,
    run_id: str,
    site: dict[str, Any],
    search: Search | None = None,
) -> list[dict[str, Any]]:
    """What of ``run_id`` is alive in ``provider``/``region``: leak entries (``kind``, ``id``,
    ``region``), or one ``unverified-scan`` entry naming why nothing could be verified."""
    try:
        q = query_for(provider, region, run_id, site)
        found = list((search or default_search(provider))(q))
    except ScanUnverified as exc:
        log.error("leak scan of %s %s unverified: %s", provider, region, exc)
        return [unverified(provider, region, str(exc))]
    except Exception as exc:  # an unreadable cloud is not "nothing left": fail closed
        log.error("leak scan of %s %s failed: %s", provider, region, exc)
        return [unverified(provider, region, f"the {provider} API failed: {exc}")]
    leaks = []
    for res in found:
        kind = str(res.get("type") or res.get("kind") or "resource")
        leaks.append(
            {
                "kind": f"{provider}:{kind}",
                "id": str(res.get("id") or res.get("name") or "?"),
                "region": str(res.get("location") or region),
                "run_id": run_id,
            }
        )
    return leaks


def unverified(provider: str, region: str, reason: str) -> dict[str, Any]:
    return {"kind": UNVERIFIED, "id": f"{provider}/{region}", "reason": reason}


def site_variables(files: Iterable[Path]) -> dict[str, Any]:
    """The site's variables from its tfvars files (later files win); unreadable files are
    skipped (the scan then says which fact it misses)."""
    import hcl2

    merged: dict[str, Any] = {}
    for path in files:
        if path.suffix != ".tfvars":
            continue
        try:
            with path.open() as fh:
                loaded = hcl2.load(fh)
        except Exception as exc:  # a broken file leaves the fact unknown, never a guess
            log.warning("cannot read site variables %s: %s", path, exc)
            continue
        for key, value in loaded.items():
            # python-hcl2 keeps a string's quotes in some versions
            if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
                value = value[1:-1]
            merged[key] = value
    return merged


# ---------------------------------------------------------------------------- SDK searches


def default_search(provider: str) -> Search:
    """The search through the provider's SDK; ``ScanUnverified`` when it is not installed."""
    if provider == "gcp":
        return _gcp_search
    if provider == "azure":
        return _azure_search
    return _no_client


def _gcp_search(q: ScanQuery) -> list[dict[str, Any]]:
    try:
        from google.cloud import asset_v1
    except ImportError as exc:
        raise ScanUnverified("google-cloud-asset is not installed: cannot ask Cloud Asset") from exc
    client = asset_v1.AssetServiceClient()  # credentials: Application Default Credentials only
    return [
        {"type": r.asset_type, "id": r.name, "location": r.location}
        for r in client.search_all_resources(request={"scope": q.scope, "query": q.query})
    ]


def _azure_search(q: ScanQuery) -> list[dict[str, Any]]:
    try:
        from azure.identity import DefaultAzureCredential
        from azure.mgmt.resourcegraph import ResourceGraphClient
        from azure.mgmt.resourcegraph.models import QueryRequest
    except ImportError as exc:
        raise ScanUnverified(
            "azure-identity/azure-mgmt-resourcegraph are not installed: cannot ask Resource Graph"
        ) from exc
    client = ResourceGraphClient(DefaultAzureCredential())
    sub = q.scope.rsplit("/", 1)[-1]
    rows = client.resources(QueryRequest(subscriptions=[sub], query=q.query)).data
    return [dict(r) for r in rows]


def _no_client(q: ScanQuery) -> list[dict[str, Any]]:
    raise ScanUnverified(
        f"burst has no {q.provider} inventory client: list {q.api} in {q.scope} by hand ({q.query})"
    )
