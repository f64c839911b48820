"""Static checks of terraform/: fmt, the HCL rules (python-hcl2), and the broken fixture."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from burst.infra.terraform import REPO_ROOT as REPO
from devtools.hclcheck import check_paths, main

TERRAFORM = REPO / "terraform"
MODULES = TERRAFORM / "modules"
STACK = TERRAFORM / "stacks" / "burst-run"
BROKEN = Path(__file__).resolve().parent / "fixtures" / "broken"

AWS_MODULES = (
    "aws-gpu-nodegroup",
    "aws-site-vpn",
    "aws-checkpoint-bucket",
    "aws-run-iam",
    "aws-hybrid-join",
)
REGIONS = (
    "ap-southeast-1",
    "ap-southeast-3",
    "ap-southeast-5",
    "me-central-1",
    "me-south-1",
    "il-central-1",
)


@pytest.mark.e2e
def test_fmt_check_passes_on_everything(tf: Any) -> None:
    res = tf("fmt", "-check", "-recursive", "-diff", "terraform/")
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.e2e
def test_fmt_check_catches_a_misformatted_file(tf: Any, tmp_path: Path) -> None:
    bad = tmp_path / "bad.tf"
    bad.write_text('variable "x" {\ntype=string\n}\n')
    res = tf("fmt", "-check", str(tmp_path))
    assert res.returncode == 3 and "bad.tf" in res.stdout


def test_hcl_checks_pass_on_terraform_dir() -> None:
    findings = check_paths([TERRAFORM])
    assert findings == [], "\n".join(map(str, findings))


@pytest.mark.e2e
def test_broken_fixture_fails_naming_file_and_resource() -> None:
    findings = {(f.resource, f.rule) for f in check_paths([BROKEN])}
    assert ("aws_s3_bucket.untagged", "tags") in findings
    assert ("aws_launch_template.imdsv1", "imdsv2") in findings
    assert ("aws_s3_bucket.untagged", "encryption") in findings
    assert ("aws_launch_template.imdsv1", "encryption") in findings
    assert ("aws_security_group.open", "ingress") in findings
    assert ("aws_kms_key.pinned", "region") in findings
    assert ("aws_kms_key.pinned", "account") in findings
    assert ("aws_kms_key.pinned", "tags") in findings
    assert ("provider.aws", "credentials") in findings
    assert ("provider.aws", "tags") in findings  # default_tags without every run tag
    assert ("provider.aws.access_key", "credentials") in findings


@pytest.mark.e2e
def test_hclcheck_command_exit_code_and_message() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "devtools.hclcheck", str(BROKEN)],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert proc.returncode == 1
    main_tf = str(BROKEN / "main.tf")
    bucket = [ln for ln in proc.stderr.splitlines() if "aws_s3_bucket.untagged: [tags]" in ln]
    imds = [ln for ln in proc.stderr.splitlines() if "aws_launch_template.imdsv1: [imdsv2]" in ln]
    assert bucket and bucket[0].startswith(f"{main_tf}:10:")
    assert imds and imds[0].startswith(f"{main_tf}:14:")
    assert "Traceback" not in proc.stderr
    clean = subprocess.run(
        [sys.executable, "-m", "devtools.hclcheck", "terraform"],
        capture_output=True,
        text=True,
        cwd=REPO,
        check=False,
    )
    assert clean.returncode == 0, clean.stderr


@pytest.mark.parametrize(
    "mutation, rule",
    [
        (
            (
                'http_tokens                 = "required"',
                'http_tokens                 = "optional"',
            ),
            "imdsv2",
        ),
        (("encrypted             = true", "encrypted             = false"), "encryption"),
        (
            (
                '    tags          = local.tags\n  }\n\n  tag_specifications {\n    resource_type = "volume"',
                '    tags          = {}\n  }\n\n  tag_specifications {\n    resource_type = "volume"',
            ),
            "tags",
        ),
        (("cidr_ipv4         = each.value", 'cidr_ipv4         = "0.0.0.0/0"'), "ingress"),
        (
            (
                "vpc_id      = var.vpc_id",
                'vpc_id      = "vpc-0123"\n  # ap-southeast-1\n  name = "x-me-central-1"',
            ),
            "region",
        ),
    ],
)
def test_each_rule_catches_a_regression_in_a_real_module(
    tmp_path: Path, mutation: tuple[str, str], rule: str
) -> None:
    mod = tmp_path / "aws-gpu-nodegroup"
    shutil.copytree(MODULES / "aws-gpu-nodegroup", mod)
    main_tf = mod / "main.tf"
    text = main_tf.read_text()
    assert mutation[0] in text, "the mutation no longer applies: update this test"
    main_tf.write_text(text.replace(mutation[0], mutation[1], 1))
    rules = {f.rule for f in check_paths([mod])}
    assert rule in rules


@pytest.mark.e2e
def test_parse_error_is_exit_2_with_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "main.tf").write_text('resource "aws_s3_bucket" "x" {\n  bucket = \n')
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "main.tf") in err and "cannot parse" in err


def test_modules_have_the_four_file_shape_and_documented_variables() -> None:
    import hcl2

    for name in (*AWS_MODULES, "local-nodegroup"):
        mod = MODULES / name
        for f in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            assert (mod / f).is_file(), f"{name}/{f} missing"
        versions = (mod / "versions.tf").read_text()
        assert re.search(r'required_version\s*=\s*">= 1\.\d+\.\d+, < 2\.0\.0"', versions), name
        if name.startswith("aws-"):
            assert re.search(r'version\s*=\s*"~> 6\.0"', versions), name
        doc = hcl2.load((mod / "variables.tf").open())
        readme = (mod / "README.md").read_text()
        for block in doc["variable"]:
            for var, body in block.items():
                var = var.strip('"')
                assert "type" in body and "description" in body, f"{name}: variable {var}"
                assert f"`{var}`" in readme, f"{name}/README.md does not document {var}"
        outputs = hcl2.load((mod / "outputs.tf").open())
        for block in outputs["output"]:
            for out, body in block.items():
                assert "description" in body, f"{name}: output {out}"
                assert f"`{out.strip(chr(34))}`" in readme, f"{name}/README.md: output {out}"


PROVIDER_STACKS = ("burst-run", "gcp-run", "azure-run", "nebius-run")
OUTPUTS_CONTRACT = (
    "region",
    "node_group_name",
    "node_selector",
    "tolerations",
    "service_account",
    "service_account_annotations",
    "pod_identity",
    "checkpoint_uri",
    "kms_key_id",
    "vpn_connection_id",
    "vpn_status",
    "tags",
)


def test_every_provider_stack_has_the_shape_the_contract_and_its_docs() -> None:
    import hcl2

    for name in PROVIDER_STACKS:
        stack = TERRAFORM / "stacks" / name
        for f in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            assert (stack / f).is_file(), f"{name}/{f} missing"
        assert (stack / "site.tfvars.example").is_file(), name
        versions = (stack / "versions.tf").read_text()
        assert re.search(r'required_version\s*=\s*">= 1\.\d+\.\d+, < 2\.0\.0"', versions), name
        outputs = {
            out.strip('"'): body
            for block in hcl2.load((stack / "outputs.tf").open())["output"]
            for out, body in block.items()
        }
        missing = [o for o in OUTPUTS_CONTRACT if o not in outputs]
        assert not missing, f"{name} lacks outputs {missing}"
        variables = hcl2.load((stack / "variables.tf").open())["variable"]
        names = {v.strip('"') for block in variables for v in block}
        assert {"run_id", "region", "capacity", "node_count", "on_demand_floor"} <= names, name
        if name == "burst-run":
            continue  # its README lists the contract; the others document every input too
        readme = (stack / "README.md").read_text()
        for var in names:
            assert f"`{var}`" in readme, f"{name}/README.md does not document {var}"
        for out in outputs:
            assert f"`{out}`" in readme, f"{name}/README.md: output {out}"


def test_aws_module_outputs_use_try() -> None:
    for name in AWS_MODULES:
        text = (MODULES / name / "outputs.tf").read_text()
        for m in re.finditer(r"value\s*=\s*(.+)", text):
            expr = m.group(1)
            if re.search(r"\baws_\w+\.", expr):
                assert expr.startswith("try("), f"{name}: {expr}"


def test_region_variable_sets() -> None:
    for region in REGIONS:
        path = STACK / "regions" / f"{region}.tfvars"
        text = path.read_text()
        assert re.search(rf'^region\s*=\s*"{region}"$', text, re.M), path
        assert re.search(r"^instance_types\s*=\s*\[", text, re.M), path


def test_stack_backend_is_partial_s3_with_lockfile_note() -> None:
    import hcl2

    doc = hcl2.load((STACK / "versions.tf").open())
    backend = doc["terraform"][0]["backend"][0]
    assert list(backend) == ['"s3"'] and set(backend['"s3"']) <= {"__is_block__"}
    main_tf = (STACK / "main.tf").read_text()
    assert "default_tags" in main_tf and "region = var.region" in main_tf


def test_stack_without_a_run_tag_in_default_tags_fails(tmp_path: Path) -> None:
    stack = tmp_path / "burst-run"
    shutil.copytree(STACK, stack)
    main_tf = stack / "main.tf"
    text = main_tf.read_text()
    line = '    "burst:cost-centre" = var.cost_centre\n'
    assert line in text
    main_tf.write_text(text.replace(line, ""))
    findings = [f for f in check_paths([stack]) if f.rule == "tags"]
    assert any(f.resource == "provider.aws" and "burst:cost-centre" in f.message for f in findings)


# The node-join contract (docs/topology.md, "Outputs contract"): aws-hybrid-join reports it,
# and every stack whose nodes join the home cluster (an output named join_method) too.
JOIN_CONTRACT = (
    "join_method",
    "cluster_name",
    "cluster_region",
    "cluster_endpoint",
    "node_role_arn",
    "nodeadm_config",
    "node_selector",
    "tolerations",
    "remote_node_cidrs",
)


def _outputs(directory: Path) -> dict[str, dict[str, Any]]:
    import hcl2

    return {
        out.strip('"'): body
        for block in hcl2.load((directory / "outputs.tf").open())["output"]
        for out, body in block.items()
    }


def test_node_join_contract_is_documented_and_kept() -> None:
    doc = (REPO / "docs" / "topology.md").read_text()
    section = doc.split("## Outputs contract", 1)[1].split("\n## ", 1)[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, flags=re.M)
    assert set(JOIN_CONTRACT) <= set(documented), set(JOIN_CONTRACT) - set(documented)
    module = _outputs(MODULES / "aws-hybrid-join")
    assert set(documented) <= set(module), set(documented) - set(module)
    # the activation code is a secret: every output that carries it is sensitive
    for name in ("ssm_activation_code", "nodeadm_config"):
        assert module[name].get("sensitive") is True, name
    joining = [s for s in PROVIDER_STACKS if "join_method" in _outputs(TERRAFORM / "stacks" / s)]
    for name in joining:
        missing = set(JOIN_CONTRACT) - set(_outputs(TERRAFORM / "stacks" / name))
        assert not missing, f"{name} joins the home cluster but lacks outputs {sorted(missing)}"


# Topology A for every provider (docs/topology.md, docs/terraform.md "Topology ... and these
# stacks"): each non-AWS stack's VMs boot with the home module's cloud-init, carry the run's
# taint, and get the firewall the topology lists; no managed node pool of the site's provider.
JOINING = {
    # stack: (VM resource type, the attribute carrying the cloud-init, firewall kind)
    "gcp-run": ("google_compute_instance_template", "metadata", "google_compute_firewall"),
    "azure-run": (
        "azurerm_linux_virtual_machine_scale_set",
        "custom_data",
        "azurerm_network_security_rule",
    ),
    "nebius-run": (
        "nebius_compute_v1_instance",
        "cloud_init_user_data",
        "nebius_vpc_v1_security_rule",
    ),
}


def _plain(node: Any) -> Any:
    """python-hcl2's output without the quotes it keeps on keys and strings."""
    if isinstance(node, dict):  # comments are not configuration
        return {k.strip('"'): _plain(v) for k, v in node.items() if k != "__comments__"}
    if isinstance(node, list):
        return [_plain(v) for v in node]
    if isinstance(node, str) and len(node) >= 2 and node[0] == node[-1] == '"':
        return node[1:-1]
    return node


def _resources(doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    return [
        body
        for block in doc.get("resource", [])
        for t, named in block.items()
        if t == kind
        for body in named.values()
    ]


@pytest.mark.parametrize("stack", sorted(JOINING))
def test_every_provider_stack_joins_the_home_cluster_as_the_topology_says(stack: str) -> None:
    import hcl2

    vm_type, user_data_attr, fw_type = JOINING[stack]
    text = (TERRAFORM / "stacks" / stack / "main.tf").read_text()
    doc = _plain(hcl2.loads(text))
    (home,) = [m["home"] for m in doc["module"] if "home" in m]
    assert home["source"] == "../../modules/aws-hybrid-join"
    assert home["providers"] == {"aws": "${aws.home}"}
    assert home["node_taints"] == ["${local.run_taint}"]
    assert 'run_taint = "burst/run-id=${var.run_id}:NoSchedule"' in text
    (vm,) = _resources(doc, vm_type)
    assert "module.home.user_data" in json.dumps(vm[user_data_attr]), stack
    for managed in (
        "google_container_node_pool",
        "azurerm_kubernetes_cluster_node_pool",
        "nebius_mk8s_v1_node_group",
    ):
        assert managed not in text, f"{stack} still has {managed}"
    # the topology's rules: inbound 10250 from the control network, outbound 443 and 10250 to it
    rules = json.dumps(_resources(doc, fw_type))
    control = "var.vpn.control_network_cidrs"
    fws = _resources(doc, fw_type)
    inbound = [
        r
        for r in fws
        if control in json.dumps(r) and "10250" in json.dumps(r) and "443" not in json.dumps(r)
    ]
    outbound = [
        r
        for r in fws
        if control in json.dumps(r) and "443" in json.dumps(r) and "10250" in json.dumps(r)
    ]
    assert inbound and outbound, f"{stack}: {rules}"
    # no public address on the nodes
    assert "access_config" not in json.dumps(vm) and "public_ip_address" not in json.dumps(vm)
