"""Leak scans of GCP, Azure and Nebius (burst.infra.cloudscan).

None of these clouds can be reached here, so the ``search`` callables below are stand-ins
(mocks, named as such) for Cloud Asset, Resource Graph and Nebius' List calls; the HTTP
searches themselves run against a fake of those APIs in test_cloudscan_http.py. What is real: the queries built from the run id and the site's tfvars
(read with the same parser as Terraform's variable files), the fail-closed rules, and (e2e) the
teardown step run as a process against a run provisioned on the local stack.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from burst.documents.plan import Candidate
from burst.infra import cloudscan
from burst.infra.cloudscan import UNVERIFIED, ScanQuery, ScanUnverified
from burst.infra.provision import provision
from burst.spec import load_spec

from .provisioning import step

SITE = {"project_id": "burst-sea", "subscription_id": "0000-sub", "resource_group_name": "rg"}
REGIONS = {"gcp": "asia-southeast1", "azure": "southeastasia", "nebius": "eu-north1"}


@pytest.mark.parametrize("provider", cloudscan.SCANNED_PROVIDERS)
def test_the_query_names_the_run_and_the_site(provider: str) -> None:
    q = cloudscan.query_for(provider, REGIONS[provider], "Run.42-x", SITE)
    assert q.provider == provider and q.region == REGIONS[provider]
    if provider == "gcp":  # the label the gcp-run stack writes: lowercase, '.' -> '_'
        assert q.scope == "projects/burst-sea"
        assert q.query == 'labels.burst-run-id="run_42-x"'
    elif provider == "azure":  # the tag itself: Azure tags keep ':' and case
        assert q.scope == "/subscriptions/0000-sub"
        assert "tags['burst:run-id'] == 'Run.42-x'" in q.query
    else:  # nebius keeps '.' and case in label values
        assert q.scope == "burst-sea" and q.query.endswith("== Run.42-x")


def test_labels_match_the_stacks_rules() -> None:
    # the stacks: gcp replace("/[^0-9A-Za-z_-]/", "_") then lower; nebius keeps '.' and case
    rid = "A.b:c/" + "x" * 80
    assert cloudscan.gcp_label(rid) == ("a_b_c_" + "x" * 80)[:63]
    assert cloudscan.nebius_label(rid) == ("A.b_c_" + "x" * 80)[:63]


@pytest.mark.parametrize("provider", cloudscan.SCANNED_PROVIDERS)
def test_found_resources_are_leaks(provider: str) -> None:
    asked: list[ScanQuery] = []

    def stand_in(q: ScanQuery) -> Iterable[dict[str, Any]]:  # mock of the provider's API
        asked.append(q)
        return [{"type": "nodepool", "id": f"np-{q.provider}", "location": q.region}]

    leaks = cloudscan.scan(provider, REGIONS[provider], "r1", SITE, search=stand_in)
    assert len(asked) == 1
    assert leaks == [
        {
            "kind": f"{provider}:nodepool",
            "id": f"np-{provider}",
            "region": REGIONS[provider],
            "run_id": "r1",
        }
    ]


@pytest.mark.parametrize("provider", cloudscan.SCANNED_PROVIDERS)
def test_nothing_found_is_clean_only_when_the_api_answered(provider: str) -> None:
    assert cloudscan.scan(provider, REGIONS[provider], "r1", SITE, search=lambda q: []) == []


@pytest.mark.parametrize(
    ("site", "search", "reason"),
    [
        ({}, lambda q: [], "no project_id"),
        (SITE, "unreachable", "metadata server (127.0.0.1:9) is unreachable"),
        (SITE, "raise", "API failed: permission denied"),
        (SITE, "unverified", "token expired"),
    ],
)
def test_an_unknown_state_is_never_clean(site: dict[str, Any], search: object, reason: str) -> None:
    def failing(q: ScanQuery) -> list[dict[str, Any]]:  # mock: the API refuses
        if search == "raise":
            raise PermissionError("permission denied")
        raise ScanUnverified("token expired")

    fn = failing if isinstance(search, str) else search
    if search == "unreachable":  # the real HTTP search, its token source on a closed port
        fn = cloudscan.GcpAssetSearch(token=cloudscan.GcpMetadataToken("127.0.0.1:9", 1.0))
    leaks = cloudscan.scan("gcp", "asia-southeast1", "r1", site, search=fn)  # type: ignore[arg-type]
    assert len(leaks) == 1 and leaks[0]["kind"] == UNVERIFIED
    assert leaks[0]["id"] == "gcp/asia-southeast1" and reason in leaks[0]["reason"]


def test_nebius_has_no_client_and_says_what_to_list() -> None:
    (leak,) = cloudscan.scan("nebius", "eu-north1", "r1", SITE)
    assert leak["kind"] == UNVERIFIED and "by hand" in leak["reason"]
    assert "burst-sea" in leak["reason"] and "labels.burst-run-id == r1" in leak["reason"]


def test_the_home_side_is_scanned_in_the_home_region(tmp_path: Path) -> None:
    """aws-hybrid-join's resources of a gcp/azure/nebius run are AWS resources in the home
    cluster's region: the site's ``home`` object names it (read from a real tfvars file)."""
    from burst.infra.leakscan import CloudResource

    site_file = tmp_path / "asia-southeast1.tfvars"
    site_file.write_text(
        'project_id = "p"\nhome = {\n  cluster_name = "home"\n  region = "ap-southeast-1"\n}\n'
    )
    site = cloudscan.site_variables([site_file])
    asked: list[tuple[str, str | None]] = []

    class StandIn:  # mock of AwsInventory (tests/teardown/test_leakscan_moto.py runs the real one)
        def __init__(self, region: str) -> None:
            self.region = region

        def tagged(self, run_id: str | None = None) -> list[CloudResource]:
            asked.append((self.region, run_id))
            role = CloudResource("iam-role", "burst-hybrid-1", "global", {"burst:run-id": "r1"})
            return [role]

    (leak,) = cloudscan.home_leaks("r1", site, StandIn)
    assert asked == [("ap-southeast-1", "r1")]
    assert leak["kind"] == "iam-role" and leak["run_id"] == "r1"

    def failing(region: str) -> Any:
        raise RuntimeError("no AWS credentials")

    (leak,) = cloudscan.home_leaks("r1", site, failing)
    assert leak["kind"] == UNVERIFIED and leak["id"] == "aws/ap-southeast-1"
    assert "no AWS credentials" in leak["reason"]
    (leak,) = cloudscan.home_leaks("r1", {"project_id": "p"}, StandIn)
    assert leak["id"] == "aws/home" and "no home.region" in leak["reason"]


def test_site_variables_come_from_tfvars(tmp_path: Path) -> None:
    a = tmp_path / "gcp.tfvars"
    a.write_text('project_id = "p-one"\nnetwork = "n"\n')
    b = tmp_path / "asia-southeast1.tfvars"
    b.write_text('project_id = "p-two"\n')
    broken = tmp_path / "broken.tfvars"
    broken.write_text("project_id = \n")
    json_vars = tmp_path / "run.tfvars.json"  # the run's own variables: not the site's
    json_vars.write_text(json.dumps({"project_id": "no"}))
    site = cloudscan.site_variables([a, b, broken, json_vars])
    assert site["project_id"] == "p-two" and site["network"] == "n"


@pytest.mark.e2e
@pytest.mark.parametrize("provider", ["gcp", "azure"])
def test_teardown_of_an_unscannable_cloud_is_exit_4_unverified(
    provider: str, runs_root: Path, quickstart_in: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run provisioned (local stack, emulating ``provider``; in-process, as preflight's
    export review would stop a US-headquartered cloud here) then torn down with
    BURST_TARGET=<provider>: the state is destroyed, but the cloud cannot be asked here, so the
    step fails closed (exit 4, one line naming the unverified scan); with BURST_TARGET=local
    the same teardown is clean."""
    region = REGIONS[provider]
    run_id = f"scan-{provider}"
    job = load_spec(quickstart_in)
    cand = Candidate(region=region, provider=provider, capacity="spot")
    doc = provision(job, run_id, runs_root / run_id / "terraform", [cand], env={})
    assert doc.status == "provisioned"

    monkeypatch.setenv("BURST_TARGET", provider)
    proc = step("teardown", quickstart_in, run_id, runs_root)
    assert proc.returncode == 4, proc.stderr
    assert f"{UNVERIFIED} {provider}/{region}" in proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads((runs_root / run_id / "docs" / "teardown.json").read_text())
    assert doc["resources_remaining"] == 0
    # the cloud itself, and the home side (no site file here: no home.region either)
    assert [(x["kind"], x["id"]) for x in doc["leaks"]] == [
        (UNVERIFIED, f"{provider}/{region}"),
        (UNVERIFIED, "aws/home"),
    ]

    monkeypatch.setenv("BURST_TARGET", "local")
    again = step("teardown", quickstart_in, run_id, runs_root)
    assert again.returncode == 0, again.stderr
