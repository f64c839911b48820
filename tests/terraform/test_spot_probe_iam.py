"""The AWS spot probe's one permission (burst.train.spot_probe: ``ec2:GetSpotPlacementScores``)
is in the run's pod role only where the probe can run: a spec that probes
(``compute.recovery.probe_interval_s``) on an on-demand placement of the burst-run stack.
Judged with test_iam_reach's evaluator over the module's HCL; the module before it denied
the probe's call (every probe failed, and the attempt stayed on demand)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.terraform.test_iam_reach import BEFORE, MODULE, REPO, RUN_ID, STATE_BUCKET, allowed
from tests.terraform.test_iam_reach import pod_statements as statements

PROBE = ("ec2:GetSpotPlacementScores", "*")  # (the action has no resource-level ARNs)


def _probe_block(text: str) -> str:
    return text.split('sid       = "ProbeSpotPlacementScores"', 1)[0].rsplit("dynamic", 1)[1]


def test_the_pod_role_may_read_spot_placement_scores_and_nothing_more_of_ec2() -> None:
    assert allowed(statements(MODULE), *PROBE)
    ec2 = [s for s in statements(MODULE) if any(a.startswith("ec2:") for a in s.actions)]
    assert [s.actions for s in ec2] == [["ec2:GetSpotPlacementScores"]]
    assert not allowed(statements(MODULE), "ec2:DescribeSpotPriceHistory", "*")
    # only when the stack says the placement probes
    assert "for_each = var.spot_probe ? [1] : []" in _probe_block(MODULE.read_text())


def test_before_the_probe_had_no_permission() -> None:
    assert not allowed(statements(BEFORE / "terraform_modules_aws-run-iam_main.tf"), *PROBE)


def test_the_stack_grants_it_to_an_on_demand_placement_only() -> None:
    main = (REPO / "terraform" / "stacks" / "burst-run" / "main.tf").read_text()
    iam = main.split('module "iam" {', 1)[1].split("\n}", 1)[0]
    assert re.search(r'spot_probe\s*=\s*var\.spot_probe && var\.capacity == "on_demand"', iam)


@pytest.mark.parametrize(
    ("capacity", "probes", "granted"),
    [("on_demand", True, True), ("spot", True, False), ("on_demand", False, False)],
)
def test_burst_passes_spot_probe_to_an_on_demand_placement_that_probes(
    tmp_path: Path, capacity: str, probes: bool, granted: bool
) -> None:
    from burst.infra.workspace import Workspace
    from burst.spec import TAG_COST_CENTRE, TAG_EXPIRES_AT, TAG_OWNER, TAG_TEAM

    ws = Workspace("aws", RUN_ID, tmp_path, backend_config={"bucket": STATE_BUCKET})
    tags = {TAG_EXPIRES_AT: "2030-01-01T00:00:00Z", TAG_OWNER: "o", TAG_TEAM: "t"}
    variables = ws.variables(
        run_id=RUN_ID,
        candidate={
            "region": "ap-southeast-1",
            "provider": "aws",
            "instance": "p5.48xlarge",
            "capacity": capacity,
        },
        gpu_type="h100",
        node_count=1,
        tags={**tags, TAG_COST_CENTRE: "c"},
        spot_probe=probes,
    )
    assert variables.get("spot_probe", False) is granted
