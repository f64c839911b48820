"""A cloud stack whose checkpoint store burst storage cannot open is refused at plan and at
provision, in one line, before anything is rented (issue 28's walk,
docs/reference/walk-terraform.md): the gcp stack outputs ``gs://`` and the azure stack
``az://`` checkpoint URIs (terraform/stacks/*/outputs.tf), while ``burst.storage.open_store``
opens ``file://`` and ``s3://`` only, so train failed in its pod on billed GPUs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from burst.documents.plan import Candidate
from burst.errors import BadInputError
from burst.infra.provision import Provisioner
from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.providers import STACK_DIRS, STACK_STORE_SCHEMES, STORE_SCHEMES, store_refusal
from burst.storage import open_store

from .conftest import make_spec

REPO = Path(__file__).resolve().parents[2]


def test_the_schemes_are_the_stacks_own() -> None:
    """STACK_STORE_SCHEMES is read off each stack's checkpoint_uri output."""
    for kind, scheme in STACK_STORE_SCHEMES.items():
        outputs = (REPO / "terraform" / "stacks" / STACK_DIRS[kind] / "outputs.tf").read_text()
        if "module.checkpoints.checkpoint_uri" in outputs:  # aws: its bucket module's
            outputs = (
                REPO / "terraform" / "modules" / "aws-checkpoint-bucket" / "outputs.tf"
            ).read_text()
        block = outputs.split('output "checkpoint_uri" {', 1)[1].split("\n}", 1)[0]
        assert re.search(rf'value\s*=\s*(try\()?"{scheme}://', block), kind


def test_burst_storage_opens_only_the_schemes_it_claims() -> None:
    for scheme in ("gs", "az"):
        assert scheme not in STORE_SCHEMES
        with pytest.raises(BadInputError):
            open_store(f"{scheme}://bucket/prefix")


def test_plan_excludes_gcp_and_azure_under_a_cloud_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BURST_TF_STACK", "cloud")
    spec = make_spec(
        **{
            "compute.providers": ["aws", "gcp", "azure"],
            "compute.regions": ["ap-southeast-3", "asia-southeast1", "uaenorth"],
            "budget.max_usd": 1e7,
            "budget.max_hours": 5000,
        }
    )
    doc = plan(spec, load_catalog(use_env=False))
    assert {c["provider"] for c in doc["candidates"]} == {"aws"}
    own = {"gcp": "asia-southeast1", "azure": "uaenorth"}
    reasons = {
        e["provider"]: e["reason"] for e in doc["excluded"] if own.get(e["provider"]) == e["region"]
    }
    assert reasons["gcp"] == store_refusal("gcp")
    assert reasons["azure"] == store_refusal("azure")
    assert "gs://" in reasons["gcp"] and "\n" not in reasons["gcp"]


def test_provision_refuses_before_applying(tmp_path: Path) -> None:
    spec = make_spec(**{"compute.providers": ["gcp"], "compute.regions": ["asia-southeast1"]})
    p = Provisioner(
        spec,
        "r1",
        tmp_path,
        env={"BURST_TF_STACK": "cloud", "BURST_TF_STATE_BUCKET": "gcp=state"},
    )
    with pytest.raises(BadInputError, match=r"gcp stack's checkpoint store is gs://"):
        p.run([Candidate(provider="gcp", region="asia-southeast1")])
    assert not any(tmp_path.iterdir())  # nothing initialised, nothing applied
