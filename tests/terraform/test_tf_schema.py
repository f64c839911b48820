"""Every module and stack in terraform/ against the providers' real schemas (from the pinned
npm bindings' .jsii manifests), at the lowest and the newest provider version the
constraints admit; and the check catches a misspelt argument, a missing required argument
and a reference to an attribute the resource does not have.

The first run fetches the packages with ``npm pack`` (registry access needed) into
``~/.cache/burst/provider-schemas``; later runs read the compact schemas cached there.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from burst.infra.terraform import REPO_ROOT
from devtools import schemacheck
from devtools.hclcheck import modules_under, parse_module
from devtools.schemacheck import PINNED, check_module, check_paths, load_schema

pytestmark = pytest.mark.e2e

TERRAFORM = REPO_ROOT / "terraform"


@pytest.fixture(scope="module")
def schemas() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    return {p: (load_schema(low), load_schema(high)) for p, (low, high) in PINNED.items()}


def test_pinned_versions_are_the_constraints_bounds(
    schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]],
) -> None:
    """Each extracted schema says which provider version it is; every versions.tf constraint
    of a pinned provider admits both, and none admits a lower major version."""
    for provider, (low, high) in schemas.items():
        assert low["provider_version"] == PINNED[provider][0].provider_version
        assert high["provider_version"] == PINNED[provider][1].provider_version
        assert len(low["resources"]) > 100 and len(high["resources"]) >= len(low["resources"])
    seen = set()
    for versions in TERRAFORM.rglob("versions.tf"):
        text = versions.read_text()
        for provider in PINNED:
            m = re.search(
                rf'{provider}\s*=\s*\{{[^}}]*source\s*=\s*"hashicorp/{provider}"[^}}]*'
                r'version\s*=\s*"([^"]+)"',
                text,
            )
            if m is None:
                continue
            seen.add(provider)
            constraint = m.group(1)
            low_v = PINNED[provider][0].provider_version
            major = low_v.split(".")[0]
            assert constraint in (f"~> {major}.0", f">= {low_v}, < {int(major) + 1}.0.0"), (
                versions,
                constraint,
            )
    assert "aws" in seen


def test_every_module_matches_both_schema_versions() -> None:
    findings, unchecked = check_paths([TERRAFORM], "both")
    assert not findings, "\n".join(map(str, findings))
    # the only types without a published binding are the neocloud's (static checks only)
    assert all(t.startswith("nebius_") for t in unchecked), unchecked


def _inject(tmp_path: Path) -> Path:
    mod = tmp_path / "aws-gpu-nodegroup"
    shutil.copytree(TERRAFORM / "modules" / "aws-gpu-nodegroup", mod)
    main = mod / "main.tf"
    text = main.read_text()
    # 1. a misspelt argument (the first node group's capacity_type)
    assert "  capacity_type          = var.capacity_type\n" in text
    text = text.replace(
        "  capacity_type          = var.capacity_type\n",
        "  capacity_typ           = var.capacity_type\n",
        1,
    )
    # 2. a missing required argument (the first node group's node_role_arn)
    text = text.replace("  node_role_arn          = var.node_role_arn\n", "", 1)
    main.write_text(text)
    # 3. a reference to an attribute the resource does not have
    outputs = mod / "outputs.tf"
    out = outputs.read_text()
    assert "aws_eks_node_group.main.node_group_name" in out
    outputs.write_text(
        out.replace(
            "aws_eks_node_group.main.node_group_name", "aws_eks_node_group.main.nodegroup_name", 1
        )
    )
    return mod


@pytest.mark.parametrize("which", [0, 1], ids=["lowest", "newest"])
def test_the_check_catches_three_injected_mistakes(
    tmp_path: Path, schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]], which: int
) -> None:
    mod_dir = _inject(tmp_path)
    ((directory, files),) = list(modules_under([mod_dir]))
    findings, _ = check_module(parse_module(directory, files), {"aws": schemas["aws"][which]})
    got = sorted((f.rule, f.address) for f in findings)
    assert got == [
        ("argument", "aws_eks_node_group.main"),
        ("reference", "aws_eks_node_group.main.nodegroup_name"),
        ("required", "aws_eks_node_group.main"),
    ], "\n".join(map(str, findings))
    text = "\n".join(map(str, findings))
    assert "unknown argument 'capacity_typ' (did you mean 'capacity_type'?)" in text
    assert "required argument 'node_role_arn' is not set" in text
    assert "aws_eks_node_group has no attribute 'nodegroup_name'" in text
    # the command line says the same, exit 1
    assert schemacheck.main([str(mod_dir)]) == 1


def test_a_type_missing_from_the_lowest_version_is_reported(
    tmp_path: Path, schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    low, high = schemas["aws"]
    new_types = sorted(set(high["resources"]) - set(low["resources"]))
    assert new_types, "aws 6.66 adds resource types to 6.0"
    kind = new_types[0]
    mod = tmp_path / "newer"
    mod.mkdir()
    (mod / "main.tf").write_text(f'resource "{kind}" "x" {{}}\n')
    ((directory, files),) = list(modules_under([mod]))
    findings, _ = check_module(parse_module(directory, files), {"aws": low})
    assert [(f.rule, f.against) for f in findings] == [("type", "aws 6.0.0")]


def test_unknown_path_and_cache_location(tmp_path: Path) -> None:
    assert schemacheck.main([str(tmp_path / "nope")]) == 2
    assert schemacheck.cache_dir().name == "provider-schemas"
    assert shutil.which("npm") or schemacheck.cache_dir().exists()


def test_the_schema_says_which_resources_must_carry_the_run_tags(
    tmp_path: Path, schemas: dict[str, tuple[dict[str, Any], dict[str, Any]]]
) -> None:
    """Azure has no provider-wide default tags: a taggable resource without tags is found;
    GCP's default_labels tag every resource of the stack, so none is required there."""
    stack = tmp_path / "azure-run"
    shutil.copytree(TERRAFORM / "stacks" / "azure-run", stack)
    main = stack / "main.tf"
    text = main.read_text()
    block = text[text.index('resource "azurerm_local_network_gateway" "control"') :]
    line = "  tags                = local.tags\n"
    assert line in block
    cut = text.index(line, text.index('resource "azurerm_local_network_gateway" "control"'))
    main.write_text(text[:cut] + text[cut + len(line) :])
    ((directory, files),) = list(modules_under([stack]))
    for which in (0, 1):
        findings, _ = check_module(
            parse_module(directory, files), {"azurerm": schemas["azurerm"][which]}
        )
        assert [(f.rule, f.address) for f in findings] == [
            ("tags", "azurerm_local_network_gateway.control")
        ], "\n".join(map(str, findings))
    gcp = tmp_path / "gcp-run"
    shutil.copytree(TERRAFORM / "stacks" / "gcp-run", gcp)
    gmain = gcp / "main.tf"
    gtext = gmain.read_text()
    assert "  default_labels = local.labels\n" in gtext
    gmain.write_text(gtext.replace("  default_labels = local.labels\n", ""))
    ((gdir, gfiles),) = list(modules_under([gcp]))
    found, _ = check_module(parse_module(gdir, gfiles), {"google": schemas["google"][1]})
    untagged = sorted(f.address for f in found if f.rule == "tags")
    # without default_labels, the labelable resources that set no labels are named
    assert "google_compute_ha_vpn_gateway.run" in untagged
    assert "google_storage_bucket.checkpoints" not in untagged  # it sets labels itself
