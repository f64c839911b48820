"""Find what a run left in a cloud region, by its ``burst:run-id`` tag.

The tagging API covers most resources but not all: it never returns EKS clusters and node
groups, IAM roles, or VPN gateways in every emulator, and it keeps returning resources that are
already deleted. So the scan asks the tagging API, lists the rest directly, and drops what is
already gone (deleted VPN connections, keys pending deletion).

Only AWS is scanned directly; other providers' inventories plug in through ``Inventory``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from burst.spec import TAG_EXPIRES_AT, TAG_RUN_ID

log = logging.getLogger(__name__)

RUN_TAG = TAG_RUN_ID
EXPIRES_TAG = TAG_EXPIRES_AT

# Deletion order: what depends on something goes before it.
DELETE_ORDER = (
    "eks-nodegroup",
    "eks-cluster",
    "vpn-connection",
    "vpn-gateway",
    "customer-gateway",
    "vpc",
    "kms-key",
    "iam-role",
)


@dataclass(frozen=True)
class CloudResource:
    kind: str
    id: str
    region: str
    tags: dict[str, str] = field(default_factory=dict, hash=False, compare=False)
    arn: str = ""
    parent: str | None = None  # e.g. the cluster of a node group

    @property
    def run_id(self) -> str | None:
        return self.tags.get(RUN_TAG)

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "id": self.id,
            "region": self.region,
            "arn": self.arn,
            "run_id": self.run_id,
            "expires_at": self.tags.get(EXPIRES_TAG),
        }


class Inventory(Protocol):
    region: str

    def tagged(self, run_id: str | None = None) -> list[CloudResource]:
        """Live resources carrying burst:run-id (= run_id when given)."""
        ...

    def delete(self, res: CloudResource) -> None: ...


def _tags(
    items: Iterable[dict[str, str]] | None, key: str = "Key", value: str = "Value"
) -> dict[str, str]:
    return {t[key]: t[value] for t in items or []}


class AwsInventory:
    """Tagged resources of one AWS region (boto3; credentials from the environment only)."""

    def __init__(self, region: str, client_factory: Callable[..., Any] | None = None) -> None:
        from burst.infra.remote_errors import aws_client

        self.region = region
        # bounded timeouts and retries: a silent endpoint fails the scan, never hangs it
        self._make = client_factory or (lambda svc: aws_client(svc, region))
        # one client per service for the inventory's life (one scan or reap pass; the next
        # builds a new inventory, which reads the credentials again): a client was built for
        # every call, about 0.3 CPU-seconds each (a session loading its service models), 72
        # of them in a reap of one run
        self._clients: dict[str, Any] = {}

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = self._make(service)
        return self._clients[service]

    # ----------------------------------------------------------------- listing

    def tagged(self, run_id: str | None = None) -> list[CloudResource]:
        found: dict[tuple[str, str], CloudResource] = {}
        for res in [
            *self._from_tagging_api(run_id),
            *self._ec2(run_id),
            *self._eks(run_id),
            *self._iam(run_id),
        ]:
            found[(res.kind, res.id)] = res
        live = [r for r in found.values() if self._is_live(r)]
        return sorted(
            live, key=lambda r: (DELETE_ORDER.index(r.kind) if r.kind in DELETE_ORDER else 99, r.id)
        )

    def _match(self, tags: dict[str, str], run_id: str | None) -> bool:
        return RUN_TAG in tags and (run_id is None or tags[RUN_TAG] == run_id)

    def _from_tagging_api(self, run_id: str | None) -> list[CloudResource]:
        api = self._client("resourcegroupstaggingapi")
        flt = {"Key": RUN_TAG, **({"Values": [run_id]} if run_id else {})}
        out = []
        for page in api.get_paginator("get_resources").paginate(TagFilters=[flt]):
            for item in page["ResourceTagMappingList"]:
                arn = item["ResourceARN"]
                kind, rid = _kind_from_arn(arn)
                if kind is None:
                    continue
                out.append(CloudResource(kind, rid, self.region, _tags(item.get("Tags")), arn))
        return out

    def _ec2(self, run_id: str | None) -> list[CloudResource]:
        ec2 = self._client("ec2")
        flt = (
            [{"Name": f"tag:{RUN_TAG}", "Values": [run_id]}]
            if run_id
            else [{"Name": "tag-key", "Values": [RUN_TAG]}]
        )
        out = []
        for gw in ec2.describe_vpn_gateways(Filters=flt)["VpnGateways"]:
            out.append(
                CloudResource("vpn-gateway", gw["VpnGatewayId"], self.region, _tags(gw.get("Tags")))
            )
        for c in ec2.describe_vpn_connections(Filters=flt)["VpnConnections"]:
            out.append(
                CloudResource(
                    "vpn-connection", c["VpnConnectionId"], self.region, _tags(c.get("Tags"))
                )
            )
        for g in ec2.describe_customer_gateways(Filters=flt)["CustomerGateways"]:
            out.append(
                CloudResource(
                    "customer-gateway", g["CustomerGatewayId"], self.region, _tags(g.get("Tags"))
                )
            )
        # Filters are a hint, not a guarantee (emulators ignore some): match the tags here.
        return [r for r in out if self._match(r.tags, run_id)]

    def _eks(self, run_id: str | None) -> list[CloudResource]:
        eks = self._client("eks")
        out = []
        for name in eks.list_clusters().get("clusters", []):
            cluster = eks.describe_cluster(name=name)["cluster"]
            ctags = cluster.get("tags") or {}
            if self._match(ctags, run_id):
                out.append(
                    CloudResource("eks-cluster", name, self.region, ctags, cluster.get("arn", ""))
                )
            for ng_name in eks.list_nodegroups(clusterName=name).get("nodegroups", []):
                ng = eks.describe_nodegroup(clusterName=name, nodegroupName=ng_name)["nodegroup"]
                tags = ng.get("tags") or {}
                if self._match(tags, run_id):
                    out.append(
                        CloudResource(
                            "eks-nodegroup",
                            ng_name,
                            self.region,
                            tags,
                            ng.get("nodegroupArn", ""),
                            parent=name,
                        )
                    )
        return out

    def _iam(self, run_id: str | None) -> list[CloudResource]:
        iam = self._client("iam")
        out = []
        for page in iam.get_paginator("list_roles").paginate():
            for role in page["Roles"]:
                tags = _tags(iam.list_role_tags(RoleName=role["RoleName"]).get("Tags"))
                if self._match(tags, run_id):
                    out.append(
                        CloudResource("iam-role", role["RoleName"], self.region, tags, role["Arn"])
                    )
        return out

    def _is_live(self, res: CloudResource) -> bool:
        if res.kind == "vpn-connection":
            c = self._client("ec2").describe_vpn_connections(VpnConnectionIds=[res.id])
            return any(x["State"] not in ("deleted", "deleting") for x in c["VpnConnections"])
        if res.kind == "vpn-gateway":
            g = self._client("ec2").describe_vpn_gateways(VpnGatewayIds=[res.id])
            return any(x["State"] not in ("deleted", "deleting") for x in g["VpnGateways"])
        if res.kind == "customer-gateway":
            g = self._client("ec2").describe_customer_gateways(CustomerGatewayIds=[res.id])
            return any(x["State"] not in ("deleted", "deleting") for x in g["CustomerGateways"])
        if res.kind == "kms-key":
            meta = self._client("kms").describe_key(KeyId=res.id)["KeyMetadata"]
            return meta["KeyState"] not in ("PendingDeletion", "PendingReplicaDeletion")
        return True

    # ----------------------------------------------------------------- deleting

    def delete(self, res: CloudResource) -> None:
        log.warning("deleting %s %s in %s (run %s)", res.kind, res.id, res.region, res.run_id)
        ec2 = self._client("ec2")
        if res.kind == "eks-nodegroup":
            self._client("eks").delete_nodegroup(clusterName=res.parent, nodegroupName=res.id)
        elif res.kind == "eks-cluster":
            self._client("eks").delete_cluster(name=res.id)
        elif res.kind == "vpn-connection":
            ec2.delete_vpn_connection(VpnConnectionId=res.id)
        elif res.kind == "vpn-gateway":
            gw = ec2.describe_vpn_gateways(VpnGatewayIds=[res.id])["VpnGateways"][0]
            for att in gw.get("VpcAttachments", []):
                if att.get("State") in ("attached", "attaching"):
                    ec2.detach_vpn_gateway(VpnGatewayId=res.id, VpcId=att["VpcId"])
            ec2.delete_vpn_gateway(VpnGatewayId=res.id)
        elif res.kind == "customer-gateway":
            ec2.delete_customer_gateway(CustomerGatewayId=res.id)
        elif res.kind == "vpc":
            ec2.delete_vpc(VpcId=res.id)
        elif res.kind == "kms-key":
            self._client("kms").schedule_key_deletion(KeyId=res.id, PendingWindowInDays=7)
        elif res.kind == "iam-role":
            iam = self._client("iam")
            for p in iam.list_attached_role_policies(RoleName=res.id)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=res.id, PolicyArn=p["PolicyArn"])
            for name in iam.list_role_policies(RoleName=res.id)["PolicyNames"]:
                iam.delete_role_policy(RoleName=res.id, PolicyName=name)
            iam.delete_role(RoleName=res.id)
        else:
            raise ValueError(f"no delete rule for {res.kind}")


def _kind_from_arn(arn: str) -> tuple[str | None, str]:
    # arn:aws:<service>:<region>:<account>:<type>/<id>
    parts = arn.split(":", 5)
    if len(parts) < 6:
        return None, arn
    service, rest = parts[2], parts[5]
    rtype, _, rid = rest.partition("/")
    kinds = {
        ("ec2", "vpc"): "vpc",
        ("ec2", "vpn-connection"): "vpn-connection",
        ("ec2", "vpn-gateway"): "vpn-gateway",
        ("ec2", "customer-gateway"): "customer-gateway",
        ("kms", "key"): "kms-key",
    }
    return kinds.get((service, rtype)), rid


def delete_in_order(inventory: Inventory, resources: list[CloudResource]) -> list[dict[str, Any]]:
    """Delete resources in dependency order; a failure is recorded, the rest still go."""
    done = []
    ordered = sorted(
        resources,
        key=lambda r: DELETE_ORDER.index(r.kind) if r.kind in DELETE_ORDER else len(DELETE_ORDER),
    )
    for res in ordered:
        entry = res.describe()
        try:
            inventory.delete(res)
            entry["result"] = "deleted"
        except Exception as exc:  # a cloud error must not stop the rest of the clean-up
            log.error("could not delete %s %s: %s", res.kind, res.id, exc)
            entry["result"] = f"error: {exc}"
        done.append(entry)
    return done
