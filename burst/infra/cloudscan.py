"""Leak scans of GCP, Azure and Nebius: which API each asks for what a run (or any run) left,
and a fail-closed answer when it cannot ask.

What each asks (the provider's own REST reference), spoken directly over HTTPS (no SDK):

* GCP: Cloud Asset Inventory ``GET v1/{scope}:searchAllResources`` over ``projects/<project_id>``
  with the query ``labels.burst-run-id="<label>"`` (one run; the gcp-run stack carries
  ``burst:run-id`` as the label ``burst-run-id``, value lowercased, other characters as ``_``)
  or ``labels.burst-run-id:*`` (any run, for the reaper); pages through ``nextPageToken``.
  Response: ``{"results": [ResourceSearchResult], "nextPageToken": str}``, each result with
  ``name``, ``assetType``, ``location``, ``labels``.
  https://cloud.google.com/asset-inventory/docs/reference/rest/v1/TopLevel/searchAllResources
  Token: the metadata server's ``instance/service-accounts/default/token`` (header
  ``Metadata-Flavor: Google``; answer ``{"access_token", "expires_in", "token_type"}``).
  https://cloud.google.com/compute/docs/access/authenticate-workloads#applications
* Azure: Resource Graph ``POST providers/Microsoft.ResourceGraph/resources`` over the
  subscription: ``Resources`` and ``ResourceContainers`` whose tag ``burst:run-id`` is the run
  id (or is not empty); pages through ``$skipToken`` (request ``options.$skipToken``).
  Response: ``{"totalRecords", "count", "resultTruncated", "$skipToken", "data": [...]}``.
  https://learn.microsoft.com/en-us/rest/api/azureresourcegraph/resourcegraph/resources/resources
  Token: workload identity (``AZURE_TENANT_ID``, ``AZURE_CLIENT_ID``,
  ``AZURE_FEDERATED_TOKEN_FILE``: the client-credentials grant with the projected token as a
  client assertion, scope ``https://management.azure.com/.default``), else the instance
  metadata service (``Metadata: true``).
  https://learn.microsoft.com/en-us/entra/identity-platform/v2-oauth2-client-creds-grant-flow
  https://learn.microsoft.com/en-us/entra/identity/managed-identities-azure-resources/how-to-use-vm-token
* Nebius: no cross-service search by label is published; each service's ``List`` under the
  project (compute instances and disks, VPC security groups, storage buckets, IAM service
  accounts), matched on the label ``burst-run-id``. https://github.com/nebius/api . burst has
  no client for these: a Nebius scan is always ``unverified``.

Every scan runs through a ``search`` callable returning the matching resources. Without the site
facts the query needs (project, subscription), without a token, on 401/403 (the scan's
identity may not read the inventory: an infrastructure fault, never bad input), on any other
HTTP error, a timeout (every request is bounded), an answer that is not the documented shape,
or paging that does not end, the scan raises ``ScanUnverified`` and the caller records an
``unverified-scan`` leak (teardown) or a scan error (reap): exit 4. An unknown state is never
reported as clean.
"""

from __future__ import annotations

import json
import logging
import os
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import InfraError
from burst.infra.leakscan import CloudResource
from burst.spec import TAG_EXPIRES_AT, TAG_RUN_ID

log = logging.getLogger(__name__)

SCANNED_PROVIDERS = ("gcp", "azure", "nebius")
UNVERIFIED = "unverified-scan"

# The label keys the gcp-run and nebius-run stacks derive from the burst:* tags.
LABEL_KEY = "burst-run-id"
EXPIRES_LABEL = "burst-expires-at"
# Bounds of one scan: each request, each answer, the number of pages.
TIMEOUT_S = 10.0
MAX_ANSWER_BYTES = 32 * 1024 * 1024
MAX_PAGES = 200


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


def query_for(provider: str, region: str, run_id: str | None, site: dict[str, Any]) -> ScanQuery:
    """The question to ask ``provider`` about ``run_id`` (None: any burst run, for the reaper);
    ``site`` holds the site's variables (project_id, subscription_id, ...). A missing fact
    raises ``ScanUnverified``."""

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
            f"labels.{LABEL_KEY}:*"
            if run_id is None
            else f'labels.{LABEL_KEY}="{gcp_label(run_id)}"',
        )
    if provider == "azure":
        tag = TAG_RUN_ID.replace("'", "")
        where = (
            f"isnotempty(tags['{tag}'])"
            if run_id is None
            else f"tags['{tag}'] == '{run_id.replace(chr(39), '')}'"
        )
        return ScanQuery(
            provider,
            region,
            "Microsoft.ResourceGraph/resources",
            f"/subscriptions/{need('subscription_id')}",
            f"union Resources, ResourceContainers | where {where} "
            "| project id, type, location, tags",
        )
    if provider == "nebius":
        return ScanQuery(
            provider,
            region,
            "nebius List (compute instances and disks, vpc security groups, storage buckets, "
            "iam service accounts)",
            need("project_id"),
            f"labels.{LABEL_KEY} exists"
            if run_id is None
            else f"labels.{LABEL_KEY} == {nebius_label(run_id)}",
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


def _unquote(value: Any) -> Any:
    # python-hcl2 keeps a string's quotes in some versions
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    return value


def home_leaks(
    run_id: str, site: dict[str, Any], inventory: Callable[[str], Any] | None = None
) -> list[dict[str, Any]]:
    """The run's home-side resources (terraform/modules/aws-hybrid-join: the nodes' role, the
    SSM activation, the access entry), AWS resources tagged burst:run-id in the home cluster's
    region (the site's ``home.region``). Unknown region or a failed scan: ``unverified``."""
    home = site.get("home")
    if isinstance(home, list) and len(home) == 1:  # some python-hcl2 versions wrap objects
        home = home[0]
    region = _unquote(home.get("region")) if isinstance(home, dict) else None
    if not isinstance(region, str) or not region:
        return [
            unverified(
                "aws",
                "home",
                "the site's variables have no home.region: the run's home-side resources "
                "(aws-hybrid-join) cannot be looked for",
            )
        ]
    try:
        if inventory is None:
            from burst.infra.leakscan import AwsInventory

            inv: Any = AwsInventory(region)
        else:
            inv = inventory(region)
        return [r.describe() for r in inv.tagged(run_id)]
    except Exception as exc:  # an unreadable cloud is not "nothing left": fail closed
        return [unverified("aws", region, f"the home-side scan failed: {exc}")]


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
            merged[key] = _unquote(value)
    return merged


# ---------------------------------------------------------------------------- HTTP


def _api_error(body: bytes) -> str:
    """The message of a Google or Azure error document, or the body's start."""
    try:
        doc = json.loads(body.decode("utf-8", "replace"))
        err = doc.get("error") if isinstance(doc, dict) else None
        if isinstance(err, dict):
            code = err.get("status") or err.get("code") or ""
            msg = err.get("message") or ""
            return f"{code}: {msg}".strip(": ")[:200]
        if isinstance(err, str):  # OAuth: {"error": "invalid_client", "error_description": ...}
            return f"{err}: {doc.get('error_description', '')}".strip(": ")[:200]
    except (ValueError, AttributeError):
        pass
    return " ".join(body.decode("utf-8", "replace").split())[:200]


def http_json(
    url: str,
    *,
    what: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    timeout: float = TIMEOUT_S,
) -> dict[str, Any]:
    """One bounded request whose answer must be a JSON object; every failure is
    ``ScanUnverified`` naming ``what`` and why (401/403: the identity may not read it)."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read(MAX_ANSWER_BYTES + 1)
    except urllib.error.HTTPError as exc:
        detail = _api_error(exc.read(64 * 1024))
        if exc.code in (401, 403):
            raise ScanUnverified(
                f"{what} refused the scan's identity (HTTP {exc.code}"
                + (f", {detail}" if detail else "")
                + "): it may not read the inventory"
            ) from None
        raise ScanUnverified(
            f"{what} answered HTTP {exc.code}" + (f" ({detail})" if detail else "")
        ) from None
    except TimeoutError as exc:
        raise ScanUnverified(f"{what} did not answer within {timeout:g} s") from exc
    except urllib.error.URLError as exc:
        reason = exc.reason
        if isinstance(reason, TimeoutError):
            raise ScanUnverified(f"{what} did not answer within {timeout:g} s") from None
        raise ScanUnverified(f"{what} is unreachable ({reason})") from None
    except OSError as exc:  # connection reset mid-answer, ...
        raise ScanUnverified(f"{what} failed mid-answer ({exc})") from None
    if len(raw) > MAX_ANSWER_BYTES:
        raise ScanUnverified(f"{what} answered more than {MAX_ANSWER_BYTES} bytes")
    try:
        doc = json.loads(raw)
    except ValueError:
        raise ScanUnverified(f"{what} answered something that is not JSON") from None
    if not isinstance(doc, dict):
        raise ScanUnverified(f"{what} answered JSON that is not an object")
    return doc


def _access_token(doc: dict[str, Any], what: str) -> str:
    token = doc.get("access_token")
    if not isinstance(token, str) or not token:
        raise ScanUnverified(f"{what} answered no access_token")
    return token


TokenSource = Callable[[], str]


@dataclass(frozen=True)
class GcpMetadataToken:
    """An access token of the machine's (or the pod's, with GKE workload identity) service
    account from the metadata server."""

    host: str = "metadata.google.internal"
    timeout: float = 5.0

    def __call__(self) -> str:
        what = f"the GCP metadata server ({self.host})"
        doc = http_json(
            f"http://{self.host}/computeMetadata/v1/instance/service-accounts/default/token",
            what=what,
            headers={"Metadata-Flavor": "Google"},
            timeout=self.timeout,
        )
        return _access_token(doc, what)


@dataclass(frozen=True)
class GcpExternalAccountToken:
    """Workload identity federation (a pod outside GCP, e.g. in the home EKS cluster): the
    credential configuration file names the pool provider (``audience``), the subject token
    file (``credential_source.file``: the pod's projected service-account token), the STS
    ``token_url`` and, optionally, the service account to impersonate. Exchange at STS
    (RFC 8693 token exchange), then ``generateAccessToken`` for the service account.
    https://cloud.google.com/iam/docs/workload-identity-federation-with-kubernetes
    https://cloud.google.com/iam/docs/reference/sts/rest/v1/TopLevel/token
    https://cloud.google.com/iam/docs/reference/credentials/rest/v1/projects.serviceAccounts/generateAccessToken
    """

    config_file: str
    timeout: float = 5.0
    scope: str = "https://www.googleapis.com/auth/cloud-platform"

    def _config(self) -> dict[str, Any]:
        from burst.inputs import read_text

        try:
            cfg = json.loads(read_text(self.config_file, what="GCP credential configuration"))
        except Exception as exc:
            raise ScanUnverified(f"cannot read GOOGLE_APPLICATION_CREDENTIALS: {exc}") from None
        if not isinstance(cfg, dict):
            raise ScanUnverified("GOOGLE_APPLICATION_CREDENTIALS is not a JSON object")
        kind = cfg.get("type")
        if kind != "external_account":
            raise ScanUnverified(
                f"GOOGLE_APPLICATION_CREDENTIALS is of type {kind!r}: burst uses no static "
                "service-account key; give an external_account (workload identity federation) "
                "configuration or run where the metadata server answers"
            )
        source = cfg.get("credential_source")
        if not isinstance(source, dict) or not isinstance(source.get("file"), str):
            raise ScanUnverified(
                "the external_account configuration has no credential_source.file (only a "
                "file-sourced subject token, e.g. a projected Kubernetes token, is supported)"
            )
        for key in ("audience", "token_url", "subject_token_type"):
            if not isinstance(cfg.get(key), str) or not cfg[key]:
                raise ScanUnverified(f"the external_account configuration has no {key}")
        return cfg

    def __call__(self) -> str:
        from burst.inputs import read_text

        cfg = self._config()
        path = cfg["credential_source"]["file"]
        try:
            subject = read_text(path, what="subject token", max_bytes=64 * 1024).strip()
        except Exception as exc:
            raise ScanUnverified(f"cannot read the subject token {path}: {exc}") from None
        form = urllib.parse.urlencode(
            {
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "audience": cfg["audience"],
                "scope": self.scope,
                "requested_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "subject_token": subject,
                "subject_token_type": cfg["subject_token_type"],
            }
        ).encode()
        what = f"Google STS ({cfg['token_url']})"
        doc = http_json(
            cfg["token_url"],
            what=what,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=form,
            timeout=self.timeout,
        )
        federated = _access_token(doc, what)
        url = cfg.get("service_account_impersonation_url")
        if not url:
            return federated
        what = f"IAM Credentials ({url})"
        doc = http_json(
            str(url),
            what=what,
            method="POST",
            headers={"Authorization": f"Bearer {federated}", "Content-Type": "application/json"},
            body=json.dumps({"scope": [self.scope]}).encode(),
            timeout=self.timeout,
        )
        token = doc.get("accessToken")
        if not isinstance(token, str) or not token:
            raise ScanUnverified(f"{what} answered no accessToken")
        return token


def gcp_token_source() -> TokenSource:
    """An external_account configuration when GOOGLE_APPLICATION_CREDENTIALS names one (a pod
    in the home cluster, federated), else the metadata server (a GCP machine)."""
    path = os.environ.get("GOOGLE_APPLICATION_CREDENTIALS", "")
    return GcpExternalAccountToken(path) if path else GcpMetadataToken()


@dataclass(frozen=True)
class AzureWorkloadToken:
    """Azure workload identity: the projected service-account token (``token_file``) is the
    client assertion of a client-credentials grant for ``client_id`` in ``tenant``."""

    tenant: str
    client_id: str
    token_file: str
    authority: str = "https://login.microsoftonline.com/"
    scope: str = "https://management.azure.com/.default"
    timeout: float = 5.0

    def __call__(self) -> str:
        from burst.inputs import read_text

        try:
            assertion = read_text(
                self.token_file, what="Azure federated token", max_bytes=64 * 1024
            ).strip()
        except Exception as exc:  # unreadable projected token: the scan cannot authenticate
            raise ScanUnverified(f"cannot read AZURE_FEDERATED_TOKEN_FILE: {exc}") from None
        form = urllib.parse.urlencode(
            {
                "grant_type": "client_credentials",
                "client_id": self.client_id,
                "client_assertion_type": "urn:ietf:params:oauth:client-assertion-type:jwt-bearer",
                "client_assertion": assertion,
                "scope": self.scope,
            }
        ).encode()
        what = f"Microsoft Entra ID ({self.authority.rstrip('/')}/{self.tenant})"
        doc = http_json(
            f"{self.authority.rstrip('/')}/{self.tenant}/oauth2/v2.0/token",
            what=what,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
            body=form,
            timeout=self.timeout,
        )
        return _access_token(doc, what)


@dataclass(frozen=True)
class AzureImdsToken:
    """A managed identity's token from the instance metadata service."""

    host: str = "169.254.169.254"
    resource: str = "https://management.azure.com/"
    timeout: float = 5.0

    def __call__(self) -> str:
        query = urllib.parse.urlencode({"api-version": "2018-02-01", "resource": self.resource})
        what = f"the Azure instance metadata service ({self.host})"
        doc = http_json(
            f"http://{self.host}/metadata/identity/oauth2/token?{query}",
            what=what,
            headers={"Metadata": "true"},
            timeout=self.timeout,
        )
        return _access_token(doc, what)


def azure_token_source() -> TokenSource:
    """Workload identity when its variables are set (the Azure webhook sets them), else IMDS."""
    tenant = os.environ.get("AZURE_TENANT_ID", "")
    client = os.environ.get("AZURE_CLIENT_ID", "")
    token_file = os.environ.get("AZURE_FEDERATED_TOKEN_FILE", "")
    if tenant and client and token_file:
        authority = os.environ.get("AZURE_AUTHORITY_HOST") or "https://login.microsoftonline.com/"
        return AzureWorkloadToken(tenant, client, token_file, authority)
    return AzureImdsToken()


# ---------------------------------------------------------------------------- searches


@dataclass(frozen=True)
class GcpAssetSearch:
    """Cloud Asset ``searchAllResources``, every page."""

    token: TokenSource = field(default_factory=gcp_token_source)
    endpoint: str = "https://cloudasset.googleapis.com"
    timeout: float = TIMEOUT_S
    page_size: int = 500
    max_pages: int = MAX_PAGES

    def __call__(self, q: ScanQuery) -> list[dict[str, Any]]:
        auth = {"Authorization": f"Bearer {self.token()}"}
        what = f"Cloud Asset ({self.endpoint})"
        found: list[dict[str, Any]] = []
        page = ""
        for _ in range(self.max_pages):
            params = {"query": q.query, "pageSize": str(self.page_size)}
            if page:
                params["pageToken"] = page
            url = (
                f"{self.endpoint.rstrip('/')}/v1/{urllib.parse.quote(q.scope, safe='/')}"
                f":searchAllResources?{urllib.parse.urlencode(params)}"
            )
            doc = http_json(url, what=what, headers=auth, timeout=self.timeout)
            results = doc.get("results", [])
            if not isinstance(results, list):
                raise ScanUnverified(f"{what} answered results that are not a list")
            for r in results:
                if not isinstance(r, dict) or not isinstance(r.get("name"), str):
                    raise ScanUnverified(f"{what} answered a result without a name")
                found.append(
                    {
                        "type": r.get("assetType"),
                        "id": r["name"],
                        "location": r.get("location"),
                        "labels": r.get("labels") or {},
                    }
                )
            page = doc.get("nextPageToken") or ""
            if not isinstance(page, str):
                raise ScanUnverified(f"{what} answered a nextPageToken that is not text")
            if not page:
                return found
        raise ScanUnverified(f"{what} was still paging after {self.max_pages} pages")


@dataclass(frozen=True)
class AzureGraphSearch:
    """Resource Graph ``resources`` over one subscription, every page."""

    token: TokenSource = field(default_factory=azure_token_source)
    endpoint: str = "https://management.azure.com"
    api_version: str = "2021-03-01"
    timeout: float = TIMEOUT_S
    page_size: int = 1000
    max_pages: int = MAX_PAGES

    def __call__(self, q: ScanQuery) -> list[dict[str, Any]]:
        headers = {"Authorization": f"Bearer {self.token()}", "Content-Type": "application/json"}
        what = f"Azure Resource Graph ({self.endpoint})"
        url = (
            f"{self.endpoint.rstrip('/')}/providers/Microsoft.ResourceGraph/resources"
            f"?api-version={self.api_version}"
        )
        subscription = q.scope.rsplit("/", 1)[-1]
        found: list[dict[str, Any]] = []
        skip = ""
        for _ in range(self.max_pages):
            options: dict[str, Any] = {"resultFormat": "objectArray", "$top": self.page_size}
            if skip:
                options["$skipToken"] = skip
            body = {"subscriptions": [subscription], "query": q.query, "options": options}
            doc = http_json(
                url,
                what=what,
                method="POST",
                headers=headers,
                body=json.dumps(body).encode(),
                timeout=self.timeout,
            )
            rows = doc.get("data")
            if not isinstance(rows, list):
                raise ScanUnverified(f"{what} answered no data rows (resultFormat objectArray)")
            for row in rows:
                if not isinstance(row, dict) or not isinstance(row.get("id"), str):
                    raise ScanUnverified(f"{what} answered a row without an id")
                found.append(
                    {
                        "type": row.get("type"),
                        "id": row["id"],
                        "location": row.get("location"),
                        "tags": row.get("tags") or {},
                    }
                )
            skip = doc.get("$skipToken") or ""
            if not isinstance(skip, str):
                raise ScanUnverified(f"{what} answered a $skipToken that is not text")
            if not skip:
                if str(doc.get("resultTruncated", "false")).lower() == "true":
                    raise ScanUnverified(f"{what} truncated the result without a $skipToken")
                return found
        raise ScanUnverified(f"{what} was still paging after {self.max_pages} pages")


def default_search(provider: str) -> Search:
    """The provider's REST search with the environment's identity (no SDK needed)."""
    if provider == "gcp":
        return GcpAssetSearch()
    if provider == "azure":
        return AzureGraphSearch()
    return _no_client


def _no_client(q: ScanQuery) -> list[dict[str, Any]]:
    raise ScanUnverified(
        f"burst has no {q.provider} inventory client: list {q.api} in {q.scope} by hand ({q.query})"
    )


# ---------------------------------------------------------------------------- the reaper's view


def _label_time(value: str | None) -> str | None:
    """A burst-expires-at label value back to RFC 3339 (GCP lowercases it, ':' became '_')."""
    if not value:
        return None
    return value.upper().replace("_", ":")


def burst_tags(provider: str, res: dict[str, Any]) -> dict[str, str]:
    """The burst:* tags of a found resource: Azure keeps them; GCP and Nebius carry them as
    burst-* labels (run id as the label value; expiry converted back)."""
    if provider == "azure":
        tags = res.get("tags") or {}
        return {str(k): str(v) for k, v in tags.items()} if isinstance(tags, dict) else {}
    labels = res.get("labels") or {}
    if not isinstance(labels, dict):
        return {}
    out: dict[str, str] = {}
    if labels.get(LABEL_KEY):
        out[TAG_RUN_ID] = str(labels[LABEL_KEY])
    expires = _label_time(labels.get(EXPIRES_LABEL))
    if expires:
        out[TAG_EXPIRES_AT] = expires
    return out


class CloudInventory:
    """One GCP/Azure/Nebius site seen through its leak scan, as the reaper's ``Inventory``:
    ``tagged`` lists what carries a burst run id (an unverifiable scan raises ``InfraError``:
    exit 4, never "nothing found"); ``delete`` removes nothing by label and says so (the run is
    destroyed from its Terraform state, or by hand)."""

    def __init__(
        self,
        provider: str,
        region: str,
        site: dict[str, Any],
        search: Search | None = None,
        source: str = "--cloud",
    ) -> None:
        self.provider = provider
        self.region = region
        self.site = site
        self.source = source
        self._search = search

    def tagged(self, run_id: str | None = None) -> list[CloudResource]:
        try:
            q = query_for(self.provider, self.region, run_id, self.site)
            found = list((self._search or default_search(self.provider))(q))
        except ScanUnverified as exc:
            raise InfraError(
                f"{UNVERIFIED} {self.provider}/{self.region}: {exc}", where=self.source
            ) from None
        except Exception as exc:  # an unreadable cloud is not "nothing left": fail closed
            raise InfraError(
                f"{UNVERIFIED} {self.provider}/{self.region}: the {self.provider} API failed: "
                f"{exc}",
                where=self.source,
            ) from None
        out = []
        for res in found:
            tags = burst_tags(self.provider, res)
            if TAG_RUN_ID not in tags:
                continue
            kind = str(res.get("type") or res.get("kind") or "resource")
            out.append(
                CloudResource(
                    f"{self.provider}:{kind}",
                    str(res.get("id") or res.get("name") or "?"),
                    str(res.get("location") or self.region),
                    tags,
                )
            )
        return sorted(out, key=lambda r: (r.run_id or "", r.kind, r.id))

    def delete(self, res: CloudResource) -> None:
        raise InfraError(
            f"burst deletes no {self.provider} resource by label ({res.kind} {res.id}): "
            "destroy the run from its Terraform state, or delete it by hand"
        )
