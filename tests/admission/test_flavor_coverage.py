"""Which Kueue flavor covers a run's placement (burst/admission/coverage.py), and the refusal
before renting when none does (burst/admission/kueue_reader.py, the provision step).

The objects are the shipped deploy/kueue files and what `burst kueue` prints, as dicts (the
shape the API server returns); the placements are every combination the catalog rents."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from burst.admission.coverage import RunPlacement, coverage
from burst.admission.kueue_objects import flavor_name, profile_for
from burst.admission.kueue_reader import (
    FlavorRefused,
    InCluster,
    KueueReader,
    TeamQueue,
    covered_candidates,
    on_cluster,
)
from burst.cli.main import cli
from burst.documents.plan import Candidate
from burst.errors import EXIT_INFRA, EXIT_REFUSED, InfraError
from burst.plan.catalog import load_catalog
from burst.providers import PROVIDER_STACKS
from burst.spec import BurstJob, load_spec

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO / "deploy" / "kueue"
CAPACITIES = ("spot", "on_demand", "spot_with_floor")

Obj = dict[str, Any]


def _docs(text: str) -> list[Obj]:
    return [d for d in yaml.safe_load_all(text) if d]


def _shipped() -> tuple[list[Obj], dict[str, Obj]]:
    flavors = _docs((KUEUE / "flavors.yaml").read_text())
    queues = {q["metadata"]["name"]: q for q in _docs((KUEUE / "clusterqueues.yaml").read_text())}
    return flavors, queues


def _combinations() -> list[RunPlacement]:
    """Every (provider, region, GPU type) the catalog offers, times the capacities a plan may
    choose, with a full node of that offer."""
    cat = load_catalog(use_env=False)
    return [
        RunPlacement(o.provider, o.region, o.gpu_type, cap, o.gpus_per_instance)
        for o in cat.offers.values()
        for cap in CAPACITIES
    ]


def _expected(p: RunPlacement) -> str:
    """The flavor Kueue admits a placement's pod under: its own, or for an AWS spot run with
    an on-demand floor (no capacity in its selector) the region's spot flavor, tried first."""
    profile = profile_for(p.provider)
    assert profile is not None
    return flavor_name(p.gpu_type, p.region, profile.flavor_capacities(p.capacity)[0])


def test_the_shipped_objects_cover_aws_and_nebius_and_no_other_provider() -> None:
    flavors, queues = _shipped()
    for queue in queues.values():
        covered: dict[tuple[str, str, str, str], str | None] = {}
        for p in _combinations():
            verdict = coverage(p, queue, flavors)
            covered[(p.provider, p.region, p.gpu_type, p.capacity)] = verdict.flavor
            assert verdict.covered == (verdict.refusal is None)
            if p.provider in ("aws", "nebius"):  # the providers deploy/kueue is made for
                assert verdict.flavor == _expected(p), (p, verdict.refusal)
            else:
                assert not verdict.covered, (p, verdict.flavor)
        gpu_types = {k[2] for k, v in covered.items() if v}
        assert gpu_types == {"h100", "h200"}  # b200 is rented on gcp only: never admitted
        assert not any(v for k, v in covered.items() if k[2] == "b200")


def test_the_objects_burst_kueue_generates_cover_every_catalog_combination() -> None:
    """`burst kueue` for every provider a Terraform stack rents on (more than 16 flavors:
    --local-queue-status-64) covers every combination of those providers the catalog offers,
    in every team's ClusterQueue; a provider no stack rents (oci) stays uncovered."""
    args = ["kueue", "--local-queue-status-64"]
    for provider in PROVIDER_STACKS:
        args += ["--provider", provider]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    objects = _docs(result.output)
    flavors = [o for o in objects if o["kind"] == "ResourceFlavor"]
    queues = [o for o in objects if o["kind"] == "ClusterQueue"]
    assert flavors and queues
    for queue in queues:
        for p in _combinations():
            verdict = coverage(p, queue, flavors)
            if p.provider in PROVIDER_STACKS:
                assert verdict.flavor == _expected(p), (queue["metadata"]["name"], p)
            else:
                assert verdict.refusal and "no Terraform stack rents oci's nodes" in verdict.refusal


def test_a_selector_value_no_flavor_names_is_refused_in_one_line() -> None:
    flavors, queues = _shipped()
    queue = queues["ml-research"]
    verdict = coverage(RunPlacement("aws", "ap-southeast-1", "rubin", "spot", 8), queue, flavors)
    assert verdict.flavor is None and verdict.refusal is not None
    line = verdict.refusal
    assert "\n" not in line
    assert "rubin in aws/ap-southeast-1 (spot)" in line
    assert "ClusterQueue ml-research" in line
    names = [f["name"] for f in queue["spec"]["resourceGroups"][0]["flavors"]]
    assert f"flavors: {', '.join(names)}" in line
    # a region no flavor names, of a GPU type that has flavors
    other = coverage(RunPlacement("aws", "me-south-1", "h100", "on_demand", 8), queue, flavors)
    assert other.refusal and "h100 in aws/me-south-1 (on_demand)" in other.refusal


def test_a_flavor_the_team_cannot_hold_the_train_pod_in_does_not_cover() -> None:
    """Quota is Kueue's third test: a team whose ClusterQueue holds fewer GPUs of the only
    matching flavor than its train pod asks for is never admitted under it."""
    flavors, queues = _shipped()
    queue = json.loads(json.dumps(queues["ml-research"]))
    queue["spec"].pop("cohortName")  # nothing to borrow
    for entry in queue["spec"]["resourceGroups"][0]["flavors"]:
        for r in entry["resources"]:
            if r["name"] == "nvidia.com/gpu":
                r["nominalQuota"] = 4
                r.pop("borrowingLimit", None)
    verdict = coverage(RunPlacement("aws", "ap-southeast-3", "h200", "spot", 8), queue, flavors)
    assert (
        verdict.refusal
        and "h200-ap-southeast-3-spot (4 GPUs at most, its train pod asks 8)" in (verdict.refusal)
    )
    assert coverage(
        RunPlacement("aws", "ap-southeast-3", "h200", "spot", 4), queue, flavors
    ).covered


def test_a_cluster_queue_naming_a_missing_flavor_admits_nothing() -> None:
    """Kueue keeps a ClusterQueue whose flavors do not all exist inactive."""
    flavors, queues = _shipped()
    kept = [f for f in flavors if f["metadata"]["name"] != "h200-eu-north1-ondemand"]
    verdict = coverage(
        RunPlacement("aws", "ap-southeast-1", "h100", "spot", 8), queues["default"], kept
    )
    assert verdict.refusal and "do not exist: h200-eu-north1-ondemand" in verdict.refusal


def test_a_flavor_whose_taint_the_pod_does_not_tolerate_does_not_cover() -> None:
    flavors, queues = _shipped()
    tainted = json.loads(json.dumps(flavors))
    for f in tainted:
        if f["metadata"]["name"] == "h100-ap-southeast-1-spot":
            f["spec"]["nodeTaints"] = [{"key": "reserved", "value": "x", "effect": "NoSchedule"}]
    p = RunPlacement("aws", "ap-southeast-1", "h100", "spot", 8)
    assert coverage(p, queues["default"], flavors).flavor == "h100-ap-southeast-1-spot"
    assert not coverage(p, queues["default"], tainted).covered


# --------------------------------------------------------------------------- the gate


@pytest.fixture
def job() -> BurstJob:
    return load_spec(REPO / "examples" / "quickstart.yaml")


def _queue(team: str) -> TeamQueue:
    flavors, queues = _shipped()
    return TeamQueue(f"burst-{team}", queues[team], flavors)


def test_uncovered_candidates_are_dropped_and_none_covered_is_refused(job: BurstJob) -> None:
    queue = _queue(job.team)
    ok = Candidate(region="ap-southeast-3", provider="aws", capacity="spot", gpu_type="h100")
    gcp = Candidate(region="asia-southeast1", provider="gcp", capacity="spot", gpu_type="b200")
    assert covered_candidates(job, [gcp, ok], queue) == [ok]
    with pytest.raises(FlavorRefused) as err:
        covered_candidates(job, [gcp, gcp], queue)
    assert err.value.exit_code == EXIT_REFUSED
    line = err.value.one_line()
    assert "b200 in gcp/asia-southeast1 (spot)" in line and f"ClusterQueue {job.team}" in line
    assert "nor any of the other 1 candidates" in line


@pytest.mark.xfail(
    strict=True,
    reason="the floor's own podSet is off (burst.admission.podsets.SPLIT_FLOOR): the engines "
    "tier's Kueue v0.17.0 admitted no two-podSet Workload",
)
def test_a_floor_run_is_covered_only_if_its_on_demand_floor_is_too(job: BurstJob) -> None:
    """An AWS spot run with an on-demand floor is charged to two flavors (its Workload's
    podSets, burst/admission/podsets.py): a team whose queue has the spot flavor but not the
    on-demand one would never have the run admitted, so it is dropped before renting."""
    import copy

    queue = _queue(job.team)
    floor = Candidate(region="ap-southeast-3", provider="aws", capacity="spot_with_floor",
                      gpu_type="h100", nodes=2, floor_nodes=1)  # fmt: skip
    assert covered_candidates(job, [floor], queue) == [floor]
    cq = copy.deepcopy(queue.cluster_queue)
    (group,) = cq["spec"]["resourceGroups"]
    group["flavors"] = [f for f in group["flavors"] if f["name"] != "h100-ap-southeast-3-ondemand"]
    with pytest.raises(FlavorRefused) as err:
        covered_candidates(job, [floor], TeamQueue(queue.local_queue, cq, queue.flavors))
    line = err.value.one_line()
    assert "podSet floor (1 on_demand node(s) of a spot_with_floor run)" in line
    assert "h100 in aws/ap-southeast-3 (on_demand)" in line


def test_only_a_step_in_an_argo_pod_on_a_cluster_reads_kueue() -> None:
    pod = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "ARGO_NODE_ID": "wf-123"}
    assert on_cluster(pod)
    assert not on_cluster({**pod, "BURST_POD_DIR": "/tmp/pod"})  # `burst run` here
    assert not on_cluster({"KUBERNETES_SERVICE_HOST": "10.0.0.1"})  # a dev pod, by hand
    assert not on_cluster({"ARGO_NODE_ID": "wf-123"})


def test_an_unreadable_api_server_is_an_infrastructure_error(tmp_path: Path) -> None:
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "9"}
    with pytest.raises(InfraError) as err:  # no token mounted
        InCluster.from_pod(env, tmp_path)
    assert err.value.exit_code == EXIT_INFRA
    (tmp_path / "token").write_text("t")
    (tmp_path / "namespace").write_text("burst")
    (tmp_path / "ca.crt").write_text("not a certificate")
    api = InCluster.from_pod(env, tmp_path)
    assert api.server == "https://127.0.0.1:9"
    with pytest.raises(InfraError) as err:
        KueueReader(api)
    assert "CA cannot be loaded" in err.value.one_line()


@pytest.mark.e2e
def test_the_provision_step_on_a_cluster_fails_closed_before_renting(
    runs_root: Path, quickstart_in: Path
) -> None:
    """A provision step in an Argo pod whose API server cannot be read exits 4 (an
    infrastructure fault, not the run's) in one line, with nothing applied."""
    from burst.infra.terraform import count_state_resources
    from burst.policy import evaluate, load_policies

    plan, decision = runs_root / "k.plan.json", runs_root / "k.decision.json"
    plan.parent.mkdir(parents=True, exist_ok=True)
    cand = Candidate(region="ap-southeast-3", provider="aws", capacity="spot")
    plan.write_text(json.dumps({"candidates": [cand.to_json()]}))
    decision.write_text(json.dumps(evaluate(load_spec(quickstart_in), load_policies()).to_json()))
    env = {
        **os.environ,
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": "9",
        "ARGO_NODE_ID": "k-1",
    }
    env.pop("BURST_POD_DIR", None)
    proc = subprocess.run(
        [
            sys.executable, "-m", "burst.steps.provision", "--spec", str(quickstart_in),
            "--run-id", "k", "--runs-root", str(runs_root), "--input", f"plan={plan}",
            "--input", f"decision={decision}",
            "--out", str(runs_root / "k.provision.json"),
        ],
        capture_output=True, text=True, check=False, env=env,
    )  # fmt: skip
    assert proc.returncode == EXIT_INFRA, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "Kueue" in proc.stderr or "service-account" in proc.stderr
    assert not (runs_root / "k" / "terraform" / "main.tf").exists()
    assert count_state_resources(runs_root / "k" / "terraform" / "terraform.tfstate") == 0
