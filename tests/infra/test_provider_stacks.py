"""Provisioning across providers: the stack each candidate is applied with, and a failover
that crosses providers on one machine (the local stack emulates each provider's capacity
errors, in that provider's words, and its outputs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burst.documents.plan import Candidate
from burst.errors import BadInputError
from burst.infra.provision import Provisioner, provision
from burst.infra.teardown import destroy_run
from burst.infra.terraform import CAPACITY_PATTERNS, REPO_ROOT
from burst.infra.workspace import (
    backend_for,
    load_workspace,
    site_vars_for,
    stack_mode,
    stack_of,
    state_key,
    workspace_for,
)
from burst.spec import BurstJob

STACKS = REPO_ROOT / "terraform" / "stacks"


def _site_dir(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    for kind, stack in (("aws", "burst-run"), ("gcp", "gcp-run"), ("azure", "azure-run")):
        (site / f"{kind}.tfvars").write_text((STACKS / stack / "site.tfvars.example").read_text())
    (site / "me-central-1.tfvars").write_text(
        (STACKS / "burst-run" / "site.tfvars.example").read_text()
    )
    return site


def test_stack_modes_and_who_applies_what() -> None:
    assert stack_mode({}) == "local"
    with pytest.raises(BadInputError, match="BURST_TF_STACK='oci' is not one of"):
        stack_mode({"BURST_TF_STACK": "oci"})
    assert stack_of("local", "oci") == ("local", "")  # the local stack emulates any provider
    assert stack_of("cloud", "gcp") == ("gcp", "")
    assert stack_of("cloud", "azure") == ("azure", "")
    assert stack_of("cloud", "nebius") == ("nebius", "")
    kind, why = stack_of("cloud", "oci")
    assert kind is None and "no Terraform stack provisions provider oci" in why
    kind, why = stack_of("aws", "gcp")  # never a GCP candidate with the AWS stack
    assert kind is None and "BURST_TF_STACK=aws applies aws candidates only" in why


def test_backends_per_stack_from_one_or_per_stack_settings() -> None:
    env = {
        "BURST_TF_STATE_BUCKET": "aws=s3-state,gcp=gcs-state,azure=acct/tfstate,nebius=nb-state",
        "BURST_TF_STATE_REGION": "aws=ap-southeast-1,nebius=eu-north1",
    }
    assert backend_for("aws", "r1", env) == {
        "bucket": "s3-state",
        "key": state_key("r1"),
        "region": "ap-southeast-1",
        "use_lockfile": "true",
        "encrypt": "true",
    }
    assert backend_for("gcp", "r1", env) == {"bucket": "gcs-state", "prefix": "burst/runs/r1"}
    assert backend_for("azure", "r1", env) == {
        "storage_account_name": "acct",
        "container_name": "tfstate",
        "key": state_key("r1"),
        "use_azuread_auth": "true",
    }
    nb = backend_for("nebius", "r1", env)
    assert nb["endpoints"] == '{s3="https://storage.eu-north1.nebius.cloud"}'
    assert nb["use_lockfile"] == "true" and nb["key"] == state_key("r1")
    with pytest.raises(BadInputError, match="for azure must be <storage account>/<container>"):
        backend_for("azure", "r1", {"BURST_TF_STATE_BUCKET": "only-an-account"})
    with pytest.raises(BadInputError, match="the gcp stack needs BURST_TF_STATE_BUCKET"):
        backend_for("gcp", "r1", {"BURST_TF_STATE_BUCKET": "aws=x"})


def test_site_vars_directory_region_file_wins(tmp_path: Path) -> None:
    site = _site_dir(tmp_path)
    env = {"BURST_TF_SITE_VARS": str(site)}
    assert site_vars_for("aws", "me-central-1", env).name == "me-central-1.tfvars"
    assert site_vars_for("aws", "ap-southeast-1", env).name == "aws.tfvars"
    assert site_vars_for("gcp", "asia-southeast1", env).name == "gcp.tfvars"
    with pytest.raises(BadInputError, match="no site file for nebius in eu-north1"):
        site_vars_for("nebius", "eu-north1", env)


def test_cloud_mode_picks_each_candidates_stack_and_records_it(tmp_path: Path) -> None:
    env = {
        "BURST_TF_STACK": "cloud",
        "BURST_TF_STATE_BUCKET": "aws=s3-state,gcp=gcs-state,azure=acct/tfstate",
        "BURST_TF_STATE_REGION": "ap-southeast-1",
        "BURST_TF_SITE_VARS": str(_site_dir(tmp_path)),
    }
    workdir = tmp_path / "runs" / "r1" / "terraform"
    gcp = workspace_for("r1", workdir, env, {"provider": "gcp", "region": "asia-southeast1"})
    assert gcp.kind == "gcp" and gcp.config_dir == (STACKS / "gcp-run").resolve()
    assert gcp.state == "gs://gcs-state/burst/runs/r1/default.tfstate"
    azure = workspace_for("r1", workdir, env, {"provider": "azure", "region": "uaenorth"})
    assert azure.kind == "azure" and azure.state == f"az://acct/tfstate/{state_key('r1')}"
    azure.prepare()
    assert load_workspace(workdir) == azure  # teardown reopens the stack the run used
    with pytest.raises(BadInputError, match="no Terraform stack provisions provider oci"):
        workspace_for("r1", workdir, env, {"provider": "oci", "region": "me-dubai-1"})


def test_variables_per_stack(tmp_path: Path) -> None:
    tags = {
        "burst:run-id": "r1",
        "burst:expires-at": "2030-01-01T00:00:00Z",
        "burst:owner": "alice",
        "burst:team": "ml",
        "burst:cost-centre": "cc-1",
    }
    env = {
        "BURST_TF_STACK": "cloud",
        "BURST_TF_STATE_BUCKET": "aws=s,gcp=g,azure=a/c,nebius=n",
        "BURST_TF_STATE_REGION": "eu-north1",
        "BURST_TF_SITE_VARS": str(STACKS / "burst-run" / "site.tfvars.example"),
    }

    def render(provider: str, region: str, instance: str) -> dict[str, Any]:
        cand = {
            "provider": provider,
            "region": region,
            "capacity": "spot_with_floor",
            "floor_nodes": 1,
            "instance": instance,
            "nodes": 2,
            "gpus": 16,
        }
        ws = workspace_for("r1", tmp_path / provider, env, cand)
        return ws.variables(run_id="r1", candidate=cand, gpu_type="h100", node_count=2, tags=tags)

    gcp = render("gcp", "asia-southeast1", "a3-highgpu-8g")
    assert (gcp["machine_type"], gcp["gpu_type"], gcp["gpus_per_node"]) == (
        "a3-highgpu-8g",
        "nvidia-h100-80gb",
        8,
    )
    assert gcp["on_demand_floor"] == 1 and gcp["capacity"] == "spot_with_floor"
    assert render("azure", "uaenorth", "Standard_ND96isr_H100_v5")["vm_size"] == (
        "Standard_ND96isr_H100_v5"
    )
    nb = render("nebius", "eu-north1", "gpu-h100-sxm/8gpu-128vcpu-1600gb")
    assert (nb["platform"], nb["preset"]) == ("gpu-h100-sxm", "8gpu-128vcpu-1600gb")
    with pytest.raises(BadInputError, match="names no instance type, which the gcp stack needs"):
        render("gcp", "asia-southeast1", "")


def test_a_stack_never_applies_another_providers_candidate(job: BurstJob, tmp_path: Path) -> None:
    env = {
        "BURST_TF_STACK": "aws",
        "BURST_TF_STATE_BUCKET": "s3-state",
        "BURST_TF_STATE_REGION": "ap-southeast-1",
        "BURST_TF_SITE_VARS": str(STACKS / "burst-run" / "site.tfvars.example"),
    }
    prov = Provisioner(job, "r1", tmp_path / "r1", env=env)
    keep, refused = prov.runnable(
        [
            Candidate(provider="gcp", region="asia-southeast1"),
            Candidate(provider="aws", region="me-central-1"),
            Candidate(provider="oci", region="me-dubai-1"),
        ]
    )
    assert keep == [Candidate(provider="aws", region="me-central-1")]
    assert [r.provider for r in refused] == ["gcp", "oci"]
    assert "needs BURST_TF_STACK=gcp or cloud" in refused[0].reason
    with pytest.raises(BadInputError, match="no candidate of the plan can be provisioned"):
        prov.run([Candidate(provider="gcp", region="asia-southeast1", capacity="spot")])
    assert not (tmp_path / "r1").exists()  # nothing prepared, nothing applied


@pytest.mark.parametrize(
    ("provider", "words"),
    [
        ("aws", "InsufficientInstanceCapacity"),
        ("gcp", "ZONE_RESOURCE_POOL_EXHAUSTED"),
        ("azure", "AllocationFailed"),
        ("nebius", "RESOURCE_EXHAUSTED"),
        ("oci", "Out of host capacity"),
    ],
)
def test_each_providers_capacity_words_are_capacity_errors(provider: str, words: str) -> None:
    main_tf = (REPO_ROOT / "terraform" / "modules" / "local-nodegroup" / "main.tf").read_text()
    line = next(ln for ln in main_tf.splitlines() if ln.strip().startswith(f"{provider} "))
    assert words in line and CAPACITY_PATTERNS.search(line)


@pytest.mark.e2e
def test_failover_crosses_providers_on_the_local_stack(job: BurstJob, tmp_path: Path) -> None:
    """GCP has no capacity (in GCP's words), then Azure has none (in Azure's), Nebius gets
    the run: each failed attempt is destroyed, the outputs are shaped as Nebius's stack."""
    candidates = [
        Candidate(provider="gcp", region="asia-southeast1", capacity="spot"),
        Candidate(provider="azure", region="uaenorth", capacity="spot"),
        Candidate(provider="nebius", region="eu-north1", capacity="spot"),
    ]
    workdir = tmp_path / "xp" / "terraform"
    env = {"BURST_SIMULATE_NO_CAPACITY": "asia-southeast1,uaenorth"}
    doc = provision(job, "xp", workdir, candidates, env=env).to_json()
    assert doc["status"] == "provisioned"
    got = [(a["provider"], a["result"]) for a in doc["attempts"]]
    assert got == [("gcp", "capacity"), ("azure", "capacity"), ("nebius", "ok")]
    assert "ZONE_RESOURCE_POOL_EXHAUSTED" in doc["attempts"][0]["error"]
    assert "AllocationFailed" in doc["attempts"][1]["error"]
    for failed in doc["attempts"][:2]:
        assert failed["cleanup"] == {"destroyed": True, "resources_remaining": 0, "error": None}
    out = doc["outputs"]
    assert out["region"] == "eu-north1" and out["checkpoint_uri"].startswith("s3://")
    assert out["service_account_annotations"] == {}
    assert out["vpn_status"] == "UP"

    # the same run on Azure: its VMs join the home cluster as hybrid nodes (the run's taint,
    # whatever the capacity) and its pods get Azure's pod identity annotation
    az = provision(job, "az", tmp_path / "az" / "terraform", candidates[1:2], env={}).to_json()
    tol = {(t["key"], t["value"]) for t in az["outputs"]["tolerations"]}
    assert tol == {("nvidia.com/gpu", "present"), ("burst/run-id", "az")}
    assert az["outputs"]["node_selector"]["eks.amazonaws.com/compute-type"] == "hybrid"
    assert "azure.workload.identity/client-id" in az["outputs"]["service_account_annotations"]
    assert destroy_run(workdir).resources_remaining == 0
    assert destroy_run(tmp_path / "az" / "terraform").resources_remaining == 0
