"""The GCP and Azure leak scans over HTTP, and the reaper's scan of those clouds, against a
FAKE of their inventory APIs (tests/teardown/fake_cloud_apis.py: a real loopback HTTP server
answering with the documented shapes). burst's own HTTP client, token exchange, paging and
fail-closed paths run for real; the clouds themselves cannot run here."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from burst.infra import cloudscan
from burst.infra.cloudscan import (
    UNVERIFIED,
    AzureGraphSearch,
    AzureImdsToken,
    AzureWorkloadToken,
    CloudInventory,
    GcpAssetSearch,
    GcpExternalAccountToken,
    GcpMetadataToken,
)
from burst.infra.leakscan import Inventory
from burst.infra.reaper import reap

from .fake_cloud_apis import TOKEN, FakeCloudApis

SITE = {"project_id": "burst-sea", "subscription_id": "0000-sub"}
NOW = dt.datetime(2030, 6, 1, tzinfo=dt.UTC)


def _gcp_result(i: int, run: str, expires: str = "2030-01-01t00_00_00z") -> dict[str, Any]:
    return {
        "name": f"//compute.googleapis.com/projects/burst-sea/zones/asia-southeast1-b/instances/vm-{i}",
        "assetType": "compute.googleapis.com/Instance",
        "project": "projects/123",
        "displayName": f"vm-{i}",
        "location": "asia-southeast1-b",
        "labels": {"burst-run-id": run, "burst-expires-at": expires, "burst-owner": "alice"},
    }


def _azure_row(i: int, run: str, expires: str = "2030-01-01T00:00:00Z") -> dict[str, Any]:
    return {
        "id": f"/subscriptions/0000-sub/resourceGroups/rg/providers/Microsoft.Compute/virtualMachineScaleSets/vmss-{i}",
        "type": "microsoft.compute/virtualmachinescalesets",
        "location": "southeastasia",
        "tags": {"burst:run-id": run, "burst:expires-at": expires},
    }


@pytest.fixture
def fake() -> Iterator[FakeCloudApis]:
    apis = FakeCloudApis()
    apis.start()
    yield apis
    apis.stop()


def _gcp(fake: FakeCloudApis, **kw: Any) -> GcpAssetSearch:
    host = fake.base.removeprefix("http://")
    return GcpAssetSearch(token=GcpMetadataToken(host=host), endpoint=fake.base, **kw)


def _azure(fake: FakeCloudApis, tmp_path: Path, **kw: Any) -> AzureGraphSearch:
    token_file = tmp_path / "azure-identity-token"
    token_file.write_text(fake.assertion + "\n")
    token = AzureWorkloadToken("tenant-1", "client-1", str(token_file), authority=fake.base)
    return AzureGraphSearch(token=token, endpoint=fake.base, **kw)


def test_gcp_scan_pages_through_cloud_asset_with_a_metadata_token(fake: FakeCloudApis) -> None:
    fake.gcp_results = [_gcp_result(i, "r1") for i in range(5)]  # 3 pages of 2
    leaks = cloudscan.scan("gcp", "asia-southeast1", "r1", SITE, search=_gcp(fake))
    assert [x["id"].rsplit("/", 1)[1] for x in leaks] == [f"vm-{i}" for i in range(5)]
    assert {x["kind"] for x in leaks} == {"gcp:compute.googleapis.com/Instance"}
    token_req, *searches = fake.requests
    assert token_req["headers"]["metadata-flavor"] == "Google"
    assert len(searches) == 3
    assert searches[0]["path"] == "/v1/projects/burst-sea:searchAllResources"
    assert searches[0]["query"]["query"] == 'labels.burst-run-id="r1"'
    assert "pageToken" not in searches[0]["query"]
    assert [s["query"].get("pageToken") for s in searches[1:]] == ["2", "4"]
    assert all(s["headers"]["authorization"] == f"Bearer {TOKEN}" for s in searches)


def test_azure_scan_pages_through_resource_graph_with_workload_identity(
    fake: FakeCloudApis, tmp_path: Path
) -> None:
    fake.azure_rows = [_azure_row(i, "r1") for i in range(3)]
    leaks = cloudscan.scan("azure", "southeastasia", "r1", SITE, search=_azure(fake, tmp_path))
    assert len(leaks) == 3 and leaks[0]["region"] == "southeastasia"
    token_req, *queries = fake.requests
    assert token_req["path"] == "/tenant-1/oauth2/v2.0/token"
    form = dict(x.split("=", 1) for x in token_req["body"].split("&"))
    assert form["grant_type"] == "client_credentials" and form["client_id"] == "client-1"
    assert form["scope"] == "https%3A%2F%2Fmanagement.azure.com%2F.default"
    assert len(queries) == 2
    first, second = (json.loads(q["body"]) for q in queries)
    assert first["subscriptions"] == ["0000-sub"]
    assert "tags['burst:run-id'] == 'r1'" in first["query"]
    assert "$skipToken" not in first["options"] and second["options"]["$skipToken"] == "2"
    assert queries[0]["query"]["api-version"] == "2021-03-01"


@pytest.mark.parametrize("provider", ["gcp", "azure"])
@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("401", "refused the scan's identity (HTTP 401"),
        ("403", "refused the scan's identity (HTTP 403"),
        ("500", "answered HTTP 500"),
        ("garbage", "not JSON"),
        ("endless", "still paging after 3 pages"),
        ("slow", "did not answer within 0.3 s"),
    ],
)
def test_every_failure_is_an_unverified_scan_never_clean(
    fake: FakeCloudApis, tmp_path: Path, provider: str, mode: str, reason: str
) -> None:
    fake.mode, fake.delay = mode, 1.5
    bounds = {"max_pages": 3, "timeout": 0.3}
    search = _gcp(fake, **bounds) if provider == "gcp" else _azure(fake, tmp_path, **bounds)
    region = "asia-southeast1" if provider == "gcp" else "southeastasia"
    (leak,) = cloudscan.scan(provider, region, "r1", SITE, search=search)
    assert leak["kind"] == UNVERIFIED and leak["id"] == f"{provider}/{region}"
    assert reason in leak["reason"], leak["reason"]
    if mode in ("401", "403"):  # the API's own words travel with the refusal
        assert (
            ("PERMISSION_DENIED" in leak["reason"])
            or ("UNAUTHENTICATED" in leak["reason"])
            or ("Authori" in leak["reason"] or "InvalidAuthenticationToken" in leak["reason"])
        )


def test_token_failures_are_unverified(fake: FakeCloudApis, tmp_path: Path) -> None:
    search = _azure(fake, tmp_path)
    fake.assertion = "another token"  # Entra refuses the client assertion
    (leak,) = cloudscan.scan("azure", "uaenorth", "r1", SITE, search=search)
    assert "refused the scan's identity (HTTP 401, invalid_client" in leak["reason"]
    missing = AzureWorkloadToken("t", "c", str(tmp_path / "no-such-token"), authority=fake.base)
    nofile = AzureGraphSearch(token=missing, endpoint=fake.base)
    (leak,) = cloudscan.scan("azure", "uaenorth", "r1", SITE, search=nofile)
    assert "cannot read AZURE_FEDERATED_TOKEN_FILE" in leak["reason"]
    closed = GcpAssetSearch(token=GcpMetadataToken(host="127.0.0.1:9", timeout=1.0))
    (leak,) = cloudscan.scan("gcp", "asia-southeast1", "r1", SITE, search=closed)
    assert "the GCP metadata server (127.0.0.1:9) is unreachable" in leak["reason"]


def _external_account(fake: FakeCloudApis, tmp_path: Path, impersonate: bool = True) -> Path:
    """A credential configuration as `gcloud iam workload-identity-pools create-cred-config`
    writes it for a Kubernetes projected token (file-sourced), pointing at the fake."""
    token = tmp_path / "gcp-token"
    token.write_text(fake.assertion)
    cfg: dict[str, Any] = {
        "type": "external_account",
        "audience": "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/"
        "burst-abc/providers/home-cluster",
        "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
        "token_url": f"{fake.base}/v1/token",
        "credential_source": {"file": str(token)},
    }
    if impersonate:
        cfg["service_account_impersonation_url"] = (
            f"{fake.base}/v1/projects/-/serviceAccounts/scan@p.iam.gserviceaccount.com"
            ":generateAccessToken"
        )
    path = tmp_path / "gcp-credentials.json"
    path.write_text(json.dumps(cfg))
    return path


def test_gcp_scan_from_outside_gcp_federates_the_pods_token(
    fake: FakeCloudApis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake.gcp_results = [_gcp_result(0, "r1")]
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(_external_account(fake, tmp_path)))
    search = GcpAssetSearch(endpoint=fake.base)  # the default token source: the env's file
    (leak,) = cloudscan.scan("gcp", "asia-southeast1", "r1", SITE, search=search)
    assert leak["id"].endswith("vm-0")
    sts, impersonate, asset = fake.requests
    form = dict(urllib.parse.parse_qsl(sts["body"]))
    assert form["grant_type"] == "urn:ietf:params:oauth:grant-type:token-exchange"
    assert form["audience"].endswith("/providers/home-cluster")
    assert form["subject_token_type"] == "urn:ietf:params:oauth:token-type:jwt"
    assert impersonate["headers"]["authorization"] == "Bearer federated-token"
    assert json.loads(impersonate["body"]) == {
        "scope": ["https://www.googleapis.com/auth/cloud-platform"]
    }
    assert asset["headers"]["authorization"] == f"Bearer {TOKEN}"

    # a static service-account key is refused; a wrong subject token is refused by STS
    key = tmp_path / "key.json"
    key.write_text(json.dumps({"type": "service_account", "private_key": "..."}))
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(key))
    (leak,) = cloudscan.scan("gcp", "asia-southeast1", "r1", SITE, search=GcpAssetSearch())
    assert leak["kind"] == UNVERIFIED and "no static service-account key" in leak["reason"]
    cfg = _external_account(fake, tmp_path, impersonate=False)
    (tmp_path / "gcp-token").write_text("not the pod's token")
    (leak,) = cloudscan.scan(
        "gcp",
        "asia-southeast1",
        "r1",
        SITE,
        search=GcpAssetSearch(GcpExternalAccountToken(str(cfg))),
    )
    assert "Google STS" in leak["reason"] and "HTTP 400" in leak["reason"]
    assert "invalid_grant" in leak["reason"]


def test_azure_identity_comes_from_workload_identity_else_imds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("AZURE_TENANT_ID", "AZURE_CLIENT_ID", "AZURE_FEDERATED_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    assert isinstance(cloudscan.azure_token_source(), AzureImdsToken)
    monkeypatch.setenv("AZURE_TENANT_ID", "t")
    monkeypatch.setenv("AZURE_CLIENT_ID", "c")
    monkeypatch.setenv("AZURE_FEDERATED_TOKEN_FILE", "/var/run/secrets/azure/tokens/token")
    src = cloudscan.azure_token_source()
    assert isinstance(src, AzureWorkloadToken) and src.tenant == "t" and src.client_id == "c"


# ----------------------------------------------------------------------------- burst reap


def test_reap_finds_expired_and_active_runs_in_gcp_and_azure_by_label(
    fake: FakeCloudApis, tmp_path: Path
) -> None:
    fake.gcp_results = [
        _gcp_result(0, "old"),
        _gcp_result(1, "old"),
        _gcp_result(2, "new", "2099-01-01t00_00_00z"),
    ]
    fake.azure_rows = [_azure_row(0, "old-az"), {**_azure_row(1, "x"), "tags": {}}]
    inventories: list[Inventory] = [
        CloudInventory("gcp", "asia-southeast1", SITE, search=_gcp(fake)),
        CloudInventory("azure", "southeastasia", SITE, search=_azure(fake, tmp_path)),
    ]
    doc = reap(NOW, tmp_path / "runs", inventories, act=False)
    got = {(r["run_id"], r["region"], len(r["resources"]), r["verdict"]) for r in doc["runs"]}
    assert got == {
        ("old", "asia-southeast1", 2, "expired"),
        ("new", "asia-southeast1", 1, "active"),
        ("old-az", "southeastasia", 1, "expired"),
    }
    searches = [r for r in fake.requests if r["path"].endswith(":searchAllResources")]
    assert searches[0]["query"]["query"] == "labels.burst-run-id:*"
    graph = [json.loads(r["body"]) for r in fake.requests if "ResourceGraph" in r["path"]]
    assert "isnotempty(tags['burst:run-id'])" in graph[0]["query"]
    assert doc["errors"] == 0 and doc["actions"] == []

    # acting: nothing is deleted by label; each expired resource is an error (exit 4)
    doc = reap(NOW, tmp_path / "runs", inventories, act=True)
    results = [r["result"] for a in doc["actions"] for r in a["resources"]]
    assert len(results) == 3 and all("deletes no" in r for r in results)
    assert doc["errors"] == 3


def test_reap_of_an_unreadable_cloud_is_a_scan_error(fake: FakeCloudApis, tmp_path: Path) -> None:
    fake.mode = "403"
    inv: Inventory = CloudInventory("gcp", "asia-southeast1", SITE, search=_gcp(fake))
    doc = reap(NOW, tmp_path / "runs", [inv], act=False)
    assert doc["errors"] == 1 and doc["runs"] == []
    (line,) = doc["scan_errors"]
    assert line.startswith(f"--cloud: {UNVERIFIED} gcp/asia-southeast1:") and "HTTP 403" in line


@pytest.mark.e2e  # four CLI processes
def test_reap_cli_cloud_option(tmp_path: Path, burst_cmd: list[str]) -> None:
    site = tmp_path / "eu-north1.tfvars"
    site.write_text('project_id = "project-e00example"\n')

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*burst_cmd, "reap", "--runs-root", str(tmp_path / "runs"), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )

    proc = run("--cloud", f"nebius={site}")  # no Nebius client: never "nothing found"
    assert proc.returncode == 4, proc.stderr
    assert f"{UNVERIFIED} nebius/eu-north1: burst has no nebius inventory client" in proc.stderr
    assert "Traceback" not in proc.stderr
    for bad in ("oci=" + str(site), f"gcp={tmp_path / 'missing.tfvars'}"):
        proc = run("--cloud", bad)
        assert proc.returncode == 2, (bad, proc.stderr)
        assert "Traceback" not in proc.stderr and proc.stderr.count("\n") == 1
    broken = tmp_path / "broken.tfvars"
    broken.write_text("project_id = \n")
    proc = run("--cloud", f"gcp={broken}")
    assert proc.returncode == 2 and "not a tfvars file" in proc.stderr
