"""BURST_TF_SITE_VARS per region (docs/topology.md) on the cluster path: a directory of
<region>.tfvars files travels to the provision and teardown pods as one workflow parameter
(a site map, burst/runner/argo.py) and is expanded there again, so that the workspace of each
placement (the first candidate, then the requeue's) takes its own region's file; a region
without one fails closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.infra.workspace import expand_site_map, site_map, workspace_for

ENV = {
    "BURST_TF_STACK": "aws",
    "BURST_TF_STATE_BUCKET": "state-bucket",
    "BURST_TF_STATE_REGION": "ap-southeast-1",
}
FIRST = {"provider": "aws", "region": "ap-southeast-1", "instance_type": "p5.48xlarge"}
SECOND = {"provider": "aws", "region": "me-central-1", "instance_type": "p5.48xlarge"}


def sites(tmp_path: Path) -> Path:
    d = tmp_path / "sites"
    d.mkdir()
    (d / "ap-southeast-1.tfvars").write_text('vpc_id = "vpc-sg"\n')
    (d / "me-central-1.tfvars.json").write_text('{"vpc_id": "vpc-uae"}\n')
    return d


def test_the_pod_gets_every_region_and_each_placement_takes_its_own(tmp_path: Path) -> None:
    d = sites(tmp_path)
    # what the provision pod receives: the parameter's text as its raw input artifact
    param = tmp_path / "inputs" / "site.tfvars"
    param.parent.mkdir()
    param.write_text(site_map(d))
    env = {**ENV, "BURST_TF_SITE_VARS": str(param)}
    first = workspace_for("run-1", tmp_path / "w", env, FIRST)
    requeued = workspace_for("run-1", tmp_path / "w", env, SECOND)
    assert first.site_vars is not None and requeued.site_vars is not None
    assert first.site_vars.name == "ap-southeast-1.tfvars"
    assert first.site_vars.read_text() == (d / "ap-southeast-1.tfvars").read_text()
    assert requeued.site_vars.name == "me-central-1.tfvars.json"
    assert requeued.site_vars.read_text() == (d / "me-central-1.tfvars.json").read_text()
    third = {**SECOND, "region": "il-central-1"}
    with pytest.raises(BadInputError, match="no site file for aws in il-central-1"):
        workspace_for("run-1", tmp_path / "w", env, third)


def test_a_plain_site_file_is_left_as_it_is(tmp_path: Path) -> None:
    plain = tmp_path / "site.tfvars"
    plain.write_text('vpc_id = "x"\n')
    assert expand_site_map(plain) == plain
    as_json = tmp_path / "site.tfvars.json"
    as_json.write_text('{"vpc_id": "x"}')
    assert expand_site_map(as_json) == as_json


def test_a_site_map_with_a_bad_name_is_refused(tmp_path: Path) -> None:
    param = tmp_path / "site.tfvars"
    param.write_text('{"kind": "burst/site-vars-by-region", "files": {"../x.tfvars": "a = 1"}}')
    with pytest.raises(BadInputError, match=r"is not <region>\.tfvars"):
        expand_site_map(param)
