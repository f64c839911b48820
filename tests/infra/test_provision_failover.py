"""Provisioning with capacity failover, on the real embedded Terraform and local module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from burst.documents.plan import Candidate
from burst.errors import CapacityError, InfraError, InjectedFailure
from burst.infra import provision as provisioning
from burst.infra.provision import RECORD_FILE
from burst.infra.teardown import destroy_run
from burst.recovery import strategy_for
from burst.spec import BurstJob

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def provision(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """The provision document as JSON (what the step writes)."""
    return provisioning.provision(*args, **kwargs).to_json()


def state_resources(workdir: Path) -> list[dict[str, Any]]:
    """The resource instances in a run's local state file, with their inputs."""
    path = workdir / "terraform.tfstate"
    if not path.exists():
        return []
    doc = json.loads(path.read_text())
    return [
        {
            "address": f"{r.get('module', '')}.{r['type']}.{r['name']}",
            "input": inst["attributes"].get("input", {}).get("value"),
        }
        for r in doc.get("resources", [])
        for inst in r.get("instances", [])
    ]


def test_capacity_errors_in_first_two_fail_over_to_third(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-a" / "terraform"
    env = {"BURST_SIMULATE_NO_CAPACITY": "ap-southeast-1,ap-southeast-3"}
    doc = provision(job, "run-a", workdir, candidates, env=env)

    assert doc["status"] == "provisioned"
    assert doc["candidate"]["region"] == "me-central-1"
    assert [(a["region"], a["result"]) for a in doc["attempts"]] == [
        ("ap-southeast-1", "capacity"),
        ("ap-southeast-3", "capacity"),
        ("me-central-1", "ok"),
    ]
    for failed in doc["attempts"][:2]:
        assert "InsufficientInstanceCapacity" in failed["error"]
        assert failed["cleanup"] == {"destroyed": True, "resources_remaining": 0, "error": None}
    assert doc["attempts"][2]["changes"] == {"add": 3, "change": 0, "remove": 0}
    assert doc["outputs"]["region"] == "me-central-1"
    assert doc["outputs"]["node_names"] == ["burst-run-a-node-0"]
    assert doc["outputs"]["tags"]["burst:run-id"] == "run-a"

    # nothing remains from the failed attempts: every resource is the third candidate's
    resources = state_resources(workdir)
    assert len(resources) == 3
    assert {r["input"]["region"] for r in resources} == {"me-central-1"}
    for r in resources:
        assert r["input"]["tags"]["burst:run-id"] == "run-a"
        assert r["input"]["tags"]["burst:expires-at"] == doc["expires_at"]

    assert destroy_run(workdir).resources_remaining == 0


def test_second_provision_for_the_same_run_changes_nothing(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-b" / "terraform"
    env = {"BURST_SIMULATE_NO_CAPACITY": "ap-southeast-1"}
    first = provision(job, "run-b", workdir, candidates, env=env)
    before = (workdir / "terraform.tfstate").read_text()
    assert first["changes"]["add"] == 3 and len(first["attempts"]) == 2

    second = provision(job, "run-b", workdir, candidates, env=env)
    assert second["changes"] == {"add": 0, "change": 0, "remove": 0}
    assert [a["region"] for a in second["attempts"]] == ["ap-southeast-3"]  # sticky
    assert second["expires_at"] == first["expires_at"]
    assert second["outputs"] == first["outputs"]
    after = json.loads((workdir / "terraform.tfstate").read_text())
    assert after["resources"] == json.loads(before)["resources"]
    destroy_run(workdir)


def test_no_capacity_anywhere_is_capacity_error_and_leaves_nothing(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-c" / "terraform"
    env = {"BURST_SIMULATE_NO_CAPACITY": ",".join(c.region for c in candidates)}
    with pytest.raises(CapacityError) as info:
        provision(job, "run-c", workdir, candidates, env=env)
    assert info.value.exit_code == 4
    doc = info.value.doc.to_json()  # type: ignore[attr-defined]
    assert doc["status"] == "failed"
    assert [a["result"] for a in doc["attempts"]] == ["capacity"] * 3
    assert state_resources(workdir) == []
    assert not (workdir / RECORD_FILE).exists()


def test_non_capacity_error_stops_without_failing_over(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    """A run id the module's validation rejects is a plain error: no second candidate."""
    workdir = tmp_path / "bad" / "terraform"
    with pytest.raises(InfraError) as info:
        provision(job, "Bad_Run", workdir, candidates)
    assert not isinstance(info.value, CapacityError)
    doc = info.value.doc.to_json()  # type: ignore[attr-defined]
    assert [a["result"] for a in doc["attempts"]] == ["error"]
    assert "run_id must be lowercase" in doc["attempts"][0]["error"]


def test_midway_failure_leaves_partial_state_that_teardown_destroys(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-d" / "terraform"
    with pytest.raises(InjectedFailure) as info:
        provision(job, "run-d", workdir, candidates, fail_midway=True)
    doc = info.value.doc.to_json()  # type: ignore[attr-defined]
    assert [a["result"] for a in doc["attempts"]] == ["injected"]
    partial = {r["address"].rsplit(".", 1)[-1] for r in state_resources(workdir)}
    assert partial == {"vpn", "node_group"}  # created before the failure, no nodes
    result = destroy_run(workdir)
    assert result.resources_remaining == 0 and state_resources(workdir) == []


def test_leftover_state_in_another_region_is_destroyed_first(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-e" / "terraform"
    with pytest.raises(InjectedFailure):
        provision(job, "run-e", workdir, candidates[:1], fail_midway=True)
    assert {r["input"]["region"] for r in state_resources(workdir)} == {"ap-southeast-1"}
    doc = provision(job, "run-e", workdir, candidates[1:])
    assert doc["candidate"]["region"] == "ap-southeast-3"
    assert {r["input"]["region"] for r in state_resources(workdir)} == {"ap-southeast-3"}
    destroy_run(workdir)


def test_failover_policy_caps_attempts(
    job: BurstJob, candidates: list[Candidate], tmp_path: Path
) -> None:
    workdir = tmp_path / "run-f" / "terraform"
    env = {"BURST_SIMULATE_NO_CAPACITY": "ap-southeast-1,ap-southeast-3"}
    with pytest.raises(CapacityError):
        provision(
            job, "run-f", workdir, candidates, env=env, policy=strategy_for(job, max_attempts=2)
        )
    assert state_resources(workdir) == []


def test_bad_plan_is_one_line_bad_input(job: BurstJob, tmp_path: Path) -> None:
    from burst.documents import PlanDocument, parse_document
    from burst.errors import BadInputError

    # a bad candidate is refused where the plan document is read (the JSON boundary)
    with pytest.raises(BadInputError, match=r"candidates\[1\]\.region"):
        parse_document(
            PlanDocument,
            {"candidates": [{"region": "ap-southeast-1", "provider": "aws"}, {"provider": "aws"}]},
        )
    with pytest.raises(InfraError, match="plan is empty"):
        provision(job, "run-g", tmp_path / "t", [])
    assert not (tmp_path / "t" / "terraform.tfstate").exists()


def test_apply_timeout_setting(job: BurstJob, candidates: list[Candidate], tmp_path: Path) -> None:
    from burst.errors import BadInputError
    from burst.infra.provision import DEFAULT_TIMEOUT_S, apply_timeout

    assert apply_timeout({}) == DEFAULT_TIMEOUT_S
    assert apply_timeout({"BURST_TF_TIMEOUT_S": "90"}) == 90.0
    for bad in ("0", "-3", "soon"):
        with pytest.raises(BadInputError, match="BURST_TF_TIMEOUT_S"):
            apply_timeout({"BURST_TF_TIMEOUT_S": bad})
    with pytest.raises(BadInputError):
        provision(job, "run-t", tmp_path / "t", candidates, env={"BURST_TF_TIMEOUT_S": "never"})
    assert not (tmp_path / "t" / "main.tf").exists()


@pytest.mark.e2e
def test_a_candidate_without_capacity_takes_the_specs_first_kind(
    job: BurstJob, tmp_path: Path
) -> None:
    """Issue 14 bug: the fallback read ``job.compute.capacity.value`` on a plain string
    (AttributeError, exit 1). A candidate without a capacity gets the spec policy's first
    kind (spot_with_fallback: spot)."""
    from burst.plan.placement import default_capacity

    assert isinstance(job.compute.capacity, str)  # what made .value an AttributeError
    workdir = tmp_path / "run-nc" / "terraform"
    doc = provision(job, "run-nc", workdir, [Candidate(region="me-central-1", provider="aws")])
    assert doc["status"] == "provisioned"
    expected = default_capacity(job.compute.capacity)
    assert doc["attempts"][0]["capacity"] == expected == "spot"
    assert {
        r["input"]["capacity"]
        for r in state_resources(workdir)
        if r["input"] and "capacity" in r["input"]
    } == {expected}
    destroy_run(workdir)
