"""What the rented nodes need of the network and of the services they register with, against
the rules the stacks write.

Egress (each firewall's published default, then the rules the stack adds):
- AWS security groups: a group Terraform manages has no egress but its rules (the provider
  removes the default allow-all); traffic to the VPC resolver (VPC+2) and to link-local
  addresses (Amazon Time Sync, 169.254.169.123) is never filtered (Amazon VPC User Guide,
  "Security group rules": "Amazon security groups ... don't filter traffic destined to and
  from ... the Amazon DNS server ... link-local addresses"). The pods still resolve through
  CoreDNS, on other nodes: DNS must be allowed.
- Nebius security groups: rules match first by priority; what none allows is denied.
- GCP: an implied allow-all egress rule at the lowest priority, unless an EGRESS deny rule.
- Azure NSG: default rule AllowInternetOutBound (65001), unless an Outbound Deny rule.
Needed: DNS (udp and tcp 53), HTTPS (443); on hybrid nodes also NTP (udp 123) and HTTP (80:
`nodeadm install` installs containerd from the distribution's package mirrors).

Registrations: an SSM hybrid activation refuses registrations past its registration_limit
(AWS Systems Manager API CreateActivation, RegistrationLimit); every VM that boots with the
user data registers as a new managed instance, and a preempted VM that its scale set or
instance group recreates boots anew.

Data-plane endpoints: the artifact repository names the bucket's regional S3 endpoint (a
VPC's S3 gateway endpoint serves its region's endpoint names only).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
TF = REPO / "terraform"
BEFORE = REPO / "tests" / "deploy" / "before"
Need = tuple[str, int]  # (protocol, port)
NODE_NEEDS: set[Need] = {("udp", 53), ("tcp", 53), ("tcp", 443)}
HYBRID_NEEDS: set[Need] = NODE_NEEDS | {("udp", 123), ("tcp", 80)}
AWS_UNFILTERED: set[Need] = {("udp", 123)}  # Amazon Time Sync is link-local


def aws_egress(text: str) -> set[Need]:
    """What the node group's security group lets out to an internet address."""
    out: set[Need] = set()
    for block in re.findall(
        r'resource "aws_vpc_security_group_egress_rule" "\w+" \{(.*?)\n\}', text, re.S
    ):
        if "0.0.0.0/0" not in block:
            continue
        protos = re.findall(r"toset\(\[(.*?)\]\)", block)
        names = (
            re.findall(r'"(\w+)"', protos[0])
            if protos
            else [re.search(r'ip_protocol\s*=\s*"([^"]+)"', block).group(1)]
        )  # type: ignore[union-attr]
        lo = int(re.search(r"from_port\s*=\s*(\d+)", block).group(1))  # type: ignore[union-attr]
        hi = int(re.search(r"to_port\s*=\s*(\d+)", block).group(1))  # type: ignore[union-attr]
        for proto in names:
            for port in (53, 80, 123, 443):
                if lo <= port <= hi:
                    out.add((proto, port))
    return out


def nebius_egress(text: str) -> set[Need]:
    out: set[Need] = set()
    for block in re.findall(
        r'resource "nebius_vpc_v1_security_rule" "\w+" \{(.*?)\n\}', text, re.S
    ):
        if (
            "egress" not in block
            or '"ALLOW"' not in block
            or "destination_security_group_id" in block
        ):
            continue
        if "destination_cidrs" in block:
            continue  # to the home networks only
        proto = re.search(r'protocol\s*=\s*"(\w+)"', block).group(1).lower()  # type: ignore[union-attr]
        ports = [
            int(p)
            for p in re.findall(
                r"\d+", re.search(r"destination_ports\s*=\s*\[(.*?)\]", block).group(1)
            )
        ]  # type: ignore[union-attr]
        for p in ports:
            for pr in ("tcp", "udp") if proto == "any" else (proto,):
                out.add((pr, p))
    return out


def default_allow_problems(path: Path, deny: str) -> list[str]:
    return [f"{path.name}: an egress deny rule"] if re.search(deny, path.read_text(), re.S) else []


def egress_problems(nodegroup: Path, nebius: Path) -> list[str]:
    out = []
    missing = NODE_NEEDS - aws_egress(nodegroup.read_text()) - AWS_UNFILTERED
    out += [f"aws-gpu-nodegroup: no egress for {p}/{n}" for p, n in sorted(missing)]
    missing = HYBRID_NEEDS - nebius_egress(nebius.read_text())
    out += [f"nebius-run: no egress for {p}/{n}" for p, n in sorted(missing)]
    out += default_allow_problems(
        TF / "stacks" / "gcp-run" / "main.tf", r'direction\s*=\s*"EGRESS".{0,400}deny \{'
    )
    out += default_allow_problems(
        TF / "stacks" / "azure-run" / "main.tf", r'direction\s*=\s*"Outbound"\s*access\s*=\s*"Deny"'
    )
    return out


def test_before_issue_28_dns_ntp_and_mirrors_were_blocked() -> None:
    problems = egress_problems(
        BEFORE / "terraform_modules_aws-gpu-nodegroup_main.tf",
        BEFORE / "terraform_stacks_nebius-run_main.tf",
    )
    assert "aws-gpu-nodegroup: no egress for udp/53" in problems
    assert {"nebius-run: no egress for udp/123", "nebius-run: no egress for tcp/80"} <= set(
        problems
    )


def test_the_nodes_reach_dns_time_mirrors_and_https() -> None:
    assert (
        egress_problems(
            TF / "modules" / "aws-gpu-nodegroup" / "main.tf",
            TF / "stacks" / "nebius-run" / "main.tf",
        )
        == []
    )


def registration_problems(path: Path) -> list[str]:
    """The activation's limit must leave room for the VMs that replace preempted ones."""
    limit = re.search(r"registration_limit\s*=\s*(.+)", path.read_text())
    assert limit, "aws-hybrid-join no longer sets registration_limit"
    if limit.group(1).strip() == "var.node_count":
        return ["registration_limit = node_count: a recreated VM can never register"]
    return []


def test_before_issue_28_a_recreated_vm_could_not_register() -> None:
    assert registration_problems(BEFORE / "terraform_modules_aws-hybrid-join_main.tf")


def test_the_activation_leaves_room_for_replacements() -> None:
    assert registration_problems(TF / "modules" / "aws-hybrid-join" / "main.tf") == []


@pytest.mark.parametrize(
    ("path", "ok"),
    [
        (REPO / "deploy" / "artifact-repository.yaml", True),
        (BEFORE / "deploy_artifact-repository.yaml", False),
    ],
)
def test_the_artifact_repository_names_the_regional_endpoint(path: Path, ok: bool) -> None:
    doc = yaml.safe_load(path.read_text())
    key = doc["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    s3 = yaml.safe_load(doc["data"][key])["s3"]
    assert (s3["endpoint"] == f"s3.{s3['region']}.amazonaws.com") is ok
