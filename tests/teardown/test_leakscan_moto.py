"""Leak scan and the reaper's tag-based path against moto (AWS emulation: no real AWS here).

moto is the mock: it stands in for AWS, which cannot be reached from these machines.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

from burst.infra.leakscan import DELETE_ORDER, AwsInventory
from burst.infra.reaper import reap

pytestmark = pytest.mark.e2e  # AWS emulated in process, 4-20 s a test: not in make test-fast

REGION = "me-central-1"
PAST = "2026-01-01T00:00:00Z"
FUTURE = "2099-01-01T00:00:00Z"


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.setenv(k, "testing")  # moto's fake credentials; never real ones
    for k in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):  # e.g. a loopback S3 fixture's
        monkeypatch.delenv(k, raising=False)
    with mock_aws():
        yield


def _tags(run_id: str | None, expires: str) -> list[dict[str, str]]:
    if run_id is None:
        return [{"Key": "Name", "Value": "untagged-by-burst"}]
    return [{"Key": "burst:run-id", "Value": run_id}, {"Key": "burst:expires-at", "Value": expires}]


def make_run(run_id: str | None, expires: str = PAST) -> dict[str, Any]:
    """What an aws run leaves: VPC, VPN (gateway, customer gateway, connection), KMS key,
    IAM role, EKS cluster and node group."""
    ec2 = boto3.client("ec2", region_name=REGION)
    tags = _tags(run_id, expires)

    def spec(kind: str) -> list[dict[str, Any]]:
        return [{"ResourceType": kind, "Tags": tags}]

    suffix = run_id or "other"
    vpc = ec2.create_vpc(CidrBlock="10.0.0.0/16", TagSpecifications=spec("vpc"))["Vpc"]["VpcId"]
    vgw = ec2.create_vpn_gateway(Type="ipsec.1", TagSpecifications=spec("vpn-gateway"))[
        "VpnGateway"
    ]["VpnGatewayId"]
    ec2.attach_vpn_gateway(VpcId=vpc, VpnGatewayId=vgw)
    cgw = ec2.create_customer_gateway(
        Type="ipsec.1",
        PublicIp="203.0.113.1",
        BgpAsn=65000,
        TagSpecifications=spec("customer-gateway"),
    )["CustomerGateway"]["CustomerGatewayId"]
    vpn = ec2.create_vpn_connection(
        Type="ipsec.1",
        CustomerGatewayId=cgw,
        VpnGatewayId=vgw,
        TagSpecifications=spec("vpn-connection"),
    )["VpnConnection"]["VpnConnectionId"]
    kms = boto3.client("kms", region_name=REGION)
    key = kms.create_key(Tags=[{"TagKey": t["Key"], "TagValue": t["Value"]} for t in tags])[
        "KeyMetadata"
    ]["KeyId"]
    iam = boto3.client("iam", region_name=REGION)
    role = iam.create_role(RoleName=f"burst-{suffix}", AssumeRolePolicyDocument="{}", Tags=tags)[
        "Role"
    ]
    eks = boto3.client("eks", region_name=REGION)
    tagmap = {t["Key"]: t["Value"] for t in tags}
    eks.create_cluster(
        name=f"c-{suffix}", roleArn=role["Arn"], resourcesVpcConfig={"subnetIds": []}, tags=tagmap
    )
    eks.create_nodegroup(
        clusterName=f"c-{suffix}",
        nodegroupName=f"ng-{suffix}",
        subnets=["subnet-1"],
        nodeRole=role["Arn"],
        tags=tagmap,
    )
    return {
        "vpc": vpc,
        "vpn-gateway": vgw,
        "customer-gateway": cgw,
        "vpn-connection": vpn,
        "kms-key": key,
        "iam-role": role["RoleName"],
        "eks-cluster": f"c-{suffix}",
        "eks-nodegroup": f"ng-{suffix}",
    }


def test_leak_scan_finds_every_kind_tagged_with_the_run(aws: None) -> None:
    ids = make_run("run-a")
    make_run("run-b", FUTURE)
    make_run(None)
    found = AwsInventory(REGION).tagged("run-a")
    assert {(r.kind, r.id) for r in found} == set(ids.items())
    assert all(r.run_id == "run-a" for r in found)


def test_reaper_deletes_expired_run_in_order_and_leaves_others(aws: None, tmp_path: Path) -> None:
    make_run("run-a")  # expired
    b = make_run("run-b", FUTURE)  # another run, not expired
    make_run(None)  # untagged: never touched
    inv = AwsInventory(REGION)

    dry = reap(dt.datetime.now(dt.UTC), tmp_path, [inv], act=False)
    assert not dry["actions"]
    assert AwsInventory(REGION).tagged("run-a"), "a dry run must not delete anything"

    doc = reap(dt.datetime.now(dt.UTC), tmp_path, [inv], act=True)
    (action,) = doc["actions"]
    assert action["run_id"] == "run-a"
    kinds = [r["kind"] for r in action["resources"]]
    assert kinds == sorted(kinds, key=DELETE_ORDER.index)
    assert kinds.index("eks-nodegroup") < kinds.index("vpn-connection") < kinds.index("vpc")
    assert all(r["result"] == "deleted" for r in action["resources"]), action
    assert AwsInventory(REGION).tagged("run-a") == []

    # run-b and the untagged run are intact
    assert {(r.kind, r.id) for r in AwsInventory(REGION).tagged("run-b")} == set(b.items())
    ec2 = boto3.client("ec2", region_name=REGION)
    untagged = ec2.describe_vpcs(Filters=[{"Name": "tag:Name", "Values": ["untagged-by-burst"]}])
    assert len(untagged["Vpcs"]) == 1
    assert boto3.client("iam", region_name=REGION).get_role(RoleName="burst-other")

    again = reap(dt.datetime.now(dt.UTC), tmp_path, [inv], act=True)
    assert [r["run_id"] for r in again["runs"]] == ["run-b"]
    assert again["actions"] == []


def test_resource_without_expiry_is_reported_not_deleted(aws: None, tmp_path: Path) -> None:
    ec2 = boto3.client("ec2", region_name=REGION)
    ec2.create_vpc(
        CidrBlock="10.1.0.0/16",
        TagSpecifications=[
            {"ResourceType": "vpc", "Tags": [{"Key": "burst:run-id", "Value": "run-x"}]}
        ],
    )
    doc = reap(dt.datetime.now(dt.UTC), tmp_path, [AwsInventory(REGION)], act=True)
    assert doc["runs"][0]["verdict"] == "unknown-expiry"
    assert doc["actions"] == []
    assert len(AwsInventory(REGION).tagged("run-x")) == 1


def test_s3_state_store_lists_runs_with_resources_and_their_expiry(
    aws: None, tmp_path: Path
) -> None:
    import json

    from burst.infra.reaper import runs_in_s3_state_store

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="states", CreateBucketConfiguration={"LocationConstraint": REGION})

    def state(tags: dict[str, str] | None, n: int) -> bytes:
        inst = {"attributes": {"id": "x", "tags_all": tags or {}}}
        return json.dumps({"resources": [{"instances": [inst] * n}]}).encode()

    s3.put_object(
        Bucket="states",
        Key="burst/runs/old/terraform.tfstate",
        Body=state({"burst:run-id": "old", "burst:expires-at": PAST}, 3),
    )
    s3.put_object(
        Bucket="states",
        Key="burst/runs/new/terraform.tfstate",
        Body=state({"burst:run-id": "new", "burst:expires-at": FUTURE}, 1),
    )
    s3.put_object(Bucket="states", Key="burst/runs/gone/terraform.tfstate", Body=state(None, 0))
    runs = {r.run_id: r for r in runs_in_s3_state_store("states", REGION)}
    assert set(runs) == {"old", "new"}  # an empty state holds nothing to reap
    assert runs["old"].resources == 3 and runs["old"].workdir is None
    assert runs["old"].location == "s3://states/burst/runs/old/terraform.tfstate"

    make_run("old")  # its resources, tagged
    doc = reap(
        dt.datetime.now(dt.UTC),
        tmp_path,
        [AwsInventory(REGION)],
        act=True,
        s3_states=list(runs.values()),
    )
    verdicts = {(r["run_id"], r["source"]): r["verdict"] for r in doc["runs"]}
    assert verdicts[("old", "state")] == "expired"
    assert verdicts[("new", "state")] == "active"
    actions = [(a["run_id"], a["action"]) for a in doc["actions"]]
    # no local stack and variables for "old" here: its tagged resources go by the tag path
    assert actions == [("old", "left-to-tag-path"), ("old", "delete-by-tags")]
    assert AwsInventory(REGION).tagged("old") == []


def test_an_inventory_builds_one_client_per_service(aws: None) -> None:
    """A client per call cost about 0.3 CPU-seconds each (a boto3 session loading its models),
    72 in a reap of one run: an inventory now keeps one per service for its life."""
    from burst.infra.remote_errors import aws_client

    made: list[str] = []

    def factory(service: str) -> Any:
        made.append(service)
        return aws_client(service, REGION)

    make_run("run-c")
    inv = AwsInventory(REGION, client_factory=factory)
    assert inv.tagged("run-c") and inv.tagged("run-c")
    assert sorted(made) == sorted(set(made)), made
