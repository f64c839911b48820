"""The rendered Terraform plan of the quickstart on the local stack is a golden: any change
to what a run would create shows in review. Rewrite it on purpose with

    BURST_UPDATE_GOLDENS=1 .venv/bin/pytest -q tests/terraform/test_tf_plan_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from burst.infra.provision import node_count
from burst.infra.workspace import workspace_for, write_vars
from burst.spec import load_spec

pytestmark = pytest.mark.e2e  # real Terraform (init and plan)

GOLDEN = Path(__file__).resolve().parent / "goldens" / "quickstart-local.plan.json"
REPO = Path(__file__).resolve().parents[2]


def render(tmp_path: Path) -> list[dict]:
    job = load_spec(REPO / "examples" / "quickstart.yaml")
    ws = workspace_for("golden-run", tmp_path / "golden-run" / "terraform", {})
    ws.prepare()
    tf = ws.terraform()
    ws.init(tf)
    candidate = {
        "region": job.compute.regions[0],
        "provider": job.compute.providers[0],
        "capacity": "spot",
    }
    write_vars(
        ws.workdir,
        ws.variables(
            run_id="golden-run",
            candidate=candidate,
            gpu_type=job.compute.gpu_type,
            node_count=node_count(job),
            tags=job.tags("golden-run", "2030-01-01T00:00:00Z"),
        ),
    )
    return tf.planned_changes(ws.var_files(candidate["region"]))


def test_quickstart_local_plan_matches_golden(tmp_path: Path) -> None:
    changes = render(tmp_path)
    text = json.dumps(changes, indent=2, sort_keys=True) + "\n"
    if os.environ.get("BURST_UPDATE_GOLDENS") == "1":
        GOLDEN.parent.mkdir(parents=True, exist_ok=True)
        GOLDEN.write_text(text)
    assert GOLDEN.exists(), "no golden yet: run with BURST_UPDATE_GOLDENS=1"
    assert json.loads(GOLDEN.read_text()) == changes, (
        "the quickstart's Terraform plan changed; if on purpose, rewrite the golden with "
        "BURST_UPDATE_GOLDENS=1"
    )
    addresses = [c["address"] for c in changes]
    assert "module.nodegroup.terraform_data.vpn" in addresses
    assert all(c["actions"] == ["create"] for c in changes)
    for c in changes:
        assert c["after"]["input"]["tags"]["burst:run-id"] == "golden-run"
