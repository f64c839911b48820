"""Teardown in a pod of its own finds what provision kept beside the state.

On a cluster every pod's runs root is its own volume: provision's workspace record and
variables were invisible to the teardown pod, which destroyed nothing ("nothing was
provisioned") while the run's nodes billed (the engines tier showed the empty runs root).
Here two directories stand for the two pods' runs roots; the state bucket is the loopback S3
server (rclone serve s3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from burst.infra import runrecord
from burst.infra.workspace import VARS_FILE, load_workspace, workspace_for, write_vars

STACKS = Path(__file__).resolve().parents[2] / "terraform" / "stacks"
pytestmark = pytest.mark.e2e  # a real S3 server


def test_teardown_in_another_pod_finds_what_provision_kept_beside_the_state(
    s3_bucket: str, tmp_path: Path
) -> None:
    site = tmp_path / "provision-pod" / "site.tfvars"
    site.parent.mkdir(parents=True)
    shutil.copy(STACKS / "burst-run" / "site.tfvars.example", site)
    env = {
        "BURST_TF_STACK": "aws",
        "BURST_TF_STATE_BUCKET": s3_bucket,
        "BURST_TF_STATE_REGION": "us-east-1",
        "BURST_TF_SITE_VARS": str(site),
    }
    provision = tmp_path / "provision-pod" / "runs" / "r1" / "terraform"
    ws = workspace_for("r1", provision, env, {"provider": "aws", "region": "me-central-1"})
    ws.prepare()
    write_vars(provision, {"run_id": "r1", "region": "me-central-1"})
    runrecord.save(ws)

    # the teardown pod: its own runs root, its own copy of the site file (the same workflow
    # parameter), provision's path gone
    teardown_site = tmp_path / "teardown-pod" / "site.tfvars"
    teardown_site.parent.mkdir(parents=True)
    shutil.move(site, teardown_site)
    teardown = tmp_path / "teardown-pod" / "runs" / "r1" / "terraform"
    assert load_workspace(teardown) is None  # what teardown saw before: nothing to destroy
    env_there = {**env, "BURST_TF_SITE_VARS": str(teardown_site)}
    assert runrecord.fetch(teardown, env_there)
    got = load_workspace(teardown)
    assert got is not None
    assert (got.kind, got.run_id, got.backend_config) == ("aws", "r1", ws.backend_config)
    assert got.site_vars == teardown_site  # this pod's site file, not provision's
    assert json.loads((teardown / VARS_FILE).read_text())["region"] == "me-central-1"
    assert runrecord.fetch(teardown, env_there)  # there now: nothing fetched again


def test_no_record_is_nothing_provisioned_and_the_local_stack_fetches_nothing(
    s3_bucket: str, tmp_path: Path
) -> None:
    env = {
        "BURST_TF_STACK": "aws",
        "BURST_TF_STATE_BUCKET": s3_bucket,
        "BURST_TF_STATE_REGION": "us-east-1",
        "BURST_TF_SITE_VARS": str(STACKS / "burst-run" / "site.tfvars.example"),
    }
    assert not runrecord.fetch(tmp_path / "runs" / "never" / "terraform", env)
    assert not runrecord.fetch(tmp_path / "runs" / "r1" / "terraform", {"BURST_TF_STACK": "local"})
