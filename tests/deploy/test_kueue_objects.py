"""deploy/kueue is generated from the catalog and the teams' GPU quota
(burst/admission/kueue_objects.py, `burst kueue --out deploy/kueue`, `make goldens`): the
committed files are exactly the generator's output, every GPU type x region x capacity type
the catalog can rent on the site's providers has a flavor in every team's ClusterQueue, and a
catalog the objects cannot express (or Kueue v0.17.0 cannot give a LocalQueue status for) is
one error line. Rewrite the files on purpose with

    BURST_UPDATE_GOLDENS=1 .venv/bin/python -m pytest -q tests/deploy/test_kueue_objects.py
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.admission import kueue_objects as ko
from burst.errors import BadInputError
from burst.plan.catalog import Catalog, load_catalog
from burst.providers import PROVIDER_STACKS, store_refusal
from burst.spec import Priority

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO / "deploy" / "kueue"
BEFORE = Path(__file__).resolve().parent / "before"


def _catalog(tmp_path: Path, text: str) -> Catalog:
    extra = tmp_path / "extra.yaml"
    extra.write_text(text)
    return load_catalog([extra], use_env=False)


def _by(objects: list[dict[str, Any]], kind: str) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objects if o["kind"] == kind}


def _queue_flavors(cq: dict[str, Any]) -> list[str]:
    (rg,) = cq["spec"]["resourceGroups"]
    return [f["name"] for f in rg["flavors"]]


def test_deploy_kueue_is_the_generators_output() -> None:
    files = ko.render(ko.kueue_objects())
    if os.environ.get("BURST_UPDATE_GOLDENS") == "1":
        ko.write(KUEUE, files)
    assert sorted(p.name for p in KUEUE.glob("*.yaml")) == sorted(files)
    for name, text in files.items():
        assert (KUEUE / name).read_text() == text, (
            f"deploy/kueue/{name} drifted from the catalog and deploy/gpu-quota.yaml: run "
            "`make goldens` (or BURST_UPDATE_GOLDENS=1 on this test)"
        )


def test_the_drift_check_catches_the_old_hand_written_flavors() -> None:
    files = ko.render(ko.kueue_objects())
    assert (BEFORE / "deploy_kueue_flavors.yaml").read_text() != files["flavors.yaml"]
    old = {
        d["metadata"]["name"]
        for d in yaml.safe_load_all((BEFORE / "deploy_kueue_flavors.yaml").read_text())
        if d
    }
    new = set(_by(ko.kueue_objects(), "ResourceFlavor"))
    assert old < new  # the h100 AWS flavors kept their names; the others were missing


def _every(cat: Catalog | None = None) -> list[dict[str, Any]]:
    """Every provider's objects: a site whose Kueue lists 64 flavors in a LocalQueue's status."""
    return ko.kueue_objects(cat, providers=PROVIDER_STACKS, local_queue_status_64=True)


def _rentable(cat: Catalog, providers: Iterable[str]) -> set[tuple[str, str, str]]:
    return {
        (o.provider, o.region, o.gpu_type)
        for o in cat.offers.values()
        if o.provider in providers
        and (o.provider, o.region) in cat.regions
        and o.facts["availability"].value != "unavailable"
    }


def coverage_problems(
    objects: list[dict[str, Any]], cat: Catalog, providers: Iterable[str] = PROVIDER_STACKS
) -> list[str]:
    """Every rentable offer on ``providers`` has, for each capacity its provider's nodes
    carry, a flavor with its GPU type, region and capacity in every team's ClusterQueue."""
    flavors = _by(objects, "ResourceFlavor")
    queues = _by(objects, "ClusterQueue")
    out = []
    for provider, region, gpu in sorted(_rentable(cat, providers)):
        profile = ko.profile_for(provider)
        assert profile is not None
        for capacity in profile.capacities:
            name = f"{gpu}-{region}-{capacity.replace('_', '')}"
            f = flavors.get(name)
            if f is None:
                out.append(f"{provider}/{region}/{gpu}/{capacity}: no flavor {name}")
                continue
            labels = f["spec"]["nodeLabels"]
            if (labels.get("accelerator"), labels.get("burst/capacity")) != (gpu, capacity):
                out.append(f"{name}: labels {labels}")
            for team, q in queues.items():
                if name not in _queue_flavors(q):
                    out.append(f"{name}: not in team {team}'s ClusterQueue")
    return out


def test_every_gpu_region_and_capacity_the_catalog_rents_has_a_flavor_in_every_queue() -> None:
    cat = load_catalog(use_env=False)
    objects = _every(cat)
    assert coverage_problems(objects, cat) == []
    # the shipped catalog: more than the one GPU type, on more than one provider
    flavors = _by(objects, "ResourceFlavor").values()
    assert {f["spec"]["nodeLabels"]["accelerator"] for f in flavors} >= {"h100", "h200", "b200"}
    # the default: every flavor of the default providers, and theirs only
    default = ko.kueue_objects(cat)
    assert coverage_problems(default, cat, ko.default_providers()) == []
    flavors = _by(default, "ResourceFlavor").values()
    assert {f["metadata"]["labels"]["burst/provider"] for f in flavors} == set(
        ko.default_providers()
    )


def test_before_the_flavors_covered_one_gpu_on_aws_only() -> None:
    old = [
        d
        for name in ("flavors", "clusterqueues")
        for d in yaml.safe_load_all((BEFORE / f"deploy_kueue_{name}.yaml").read_text())
        if d
    ]
    problems = coverage_problems(old, load_catalog(use_env=False), PROVIDER_STACKS)
    assert any(p.startswith("aws/ap-southeast-3/h200/spot") for p in problems)
    assert any(p.startswith("gcp/asia-southeast1/b200") for p in problems)
    assert any(p.startswith("nebius/eu-north1/h100/spot_with_floor") for p in problems)


def test_a_new_offer_gets_its_flavors_and_an_unavailable_one_none(tmp_path: Path) -> None:
    cat = _catalog(
        tmp_path,
        """
offers:
  - provider: gcp
    region: me-central2
    gpu_type: h200
    instance: a3-ultragpu-8g
    gpus_per_instance: 8
    on_demand_usd_per_hour: {value: 80, source: test, date: 2026-11-30}
    spot_usd_per_hour: {value: null, source: test, date: 2026-11-30}
    availability: {value: unknown, source: test, date: 2026-11-30}
  - provider: aws
    region: me-central-1
    gpu_type: h200
    instance: p5en.48xlarge
    gpus_per_instance: 8
    availability: {value: unavailable, source: test, date: 2026-11-30}
""",
    )
    objects = _every(cat)
    assert coverage_problems(objects, cat) == []
    names = set(_by(objects, "ResourceFlavor"))
    assert {"h200-me-central2-spot", "h200-me-central2-spotwithfloor"} <= names
    assert "h200-me-central2-ondemand" in names
    assert not any(n.startswith("h200-me-central-1-") for n in names)
    hybrid = _by(objects, "ResourceFlavor")["h200-me-central2-spot"]
    assert hybrid["spec"]["nodeLabels"] == {
        "accelerator": "h200",
        "burst/capacity": "spot",
        "eks.amazonaws.com/compute-type": "hybrid",
        "topology.kubernetes.io/region": "me-central2",
    }
    assert hybrid["metadata"]["labels"] == {"burst/provider": "gcp"}


def test_a_provider_without_a_stack_gets_no_flavor() -> None:
    cat = load_catalog(use_env=False)
    assert any(o.provider == "oci" for o in cat.offers.values())
    assert ko.profile_for("oci") is None
    names = set(_by(_every(cat), "ResourceFlavor"))
    assert "h100-ap-singapore-1-spot" not in names and "h100-me-dubai-1-ondemand" not in names


def test_the_flavors_of_chosen_providers_only() -> None:
    objects = ko.kueue_objects(providers=["aws"])
    flavors = _by(objects, "ResourceFlavor")
    assert flavors and all(
        f["metadata"]["labels"] == {"burst/provider": "aws"}
        and "eks.amazonaws.com/compute-type" not in f["spec"]["nodeLabels"]
        for f in flavors.values()
    )
    assert len(flavors) <= ko.LOCAL_QUEUE_STATUS_FLAVORS_V0_17
    assert (
        "# Providers the site rents on (burst kueue --provider): aws.\n"
        in (ko.render(objects)["flavors.yaml"])
    )
    with pytest.raises(BadInputError) as err:
        ko.kueue_objects(providers=["oci"])
    assert "\n" not in str(err.value) and "oci" in str(err.value)


def test_the_default_providers_are_those_burst_provisions_on_a_cloud_stack() -> None:
    """The shipped bundle's scope (deploy/kueue, `burst kueue` without --provider): every
    provider whose runs burst provisions on a cloud stack; a provider whose stack's checkpoint
    store burst cannot open has its candidates refused by the planner, so no pod of its runs
    is queued outside the local stack."""
    default = ko.default_providers()
    assert "aws" in default and len(default) < len(PROVIDER_STACKS)
    for provider, kind in PROVIDER_STACKS.items():
        assert (provider in default) == (store_refusal(kind) is None), provider
    assert ko.site_providers() == default
    assert ko.site_providers(["nebius", "aws"]) == ("aws", "nebius")  # burst.providers order


def test_more_flavors_than_kueue_v0_17_gives_a_local_queue_status_is_one_error_line() -> None:
    """walk-kueue S8: Kueue v0.17.0 refuses every status update of a LocalQueue whose
    ClusterQueue has more than 16 flavors (the shipped catalog rents 28 on every provider): the
    generator refuses them unless the site's Kueue lists 64 (kubernetes-sigs/kueue#12082)."""
    with pytest.raises(BadInputError) as err:
        ko.kueue_objects(providers=PROVIDER_STACKS)
    line = _one_line(err)
    assert "more than 16" in line and "--provider" in line and "--local-queue-status-64" in line
    for q in _by(_every(), "ClusterQueue").values():
        assert len(_queue_flavors(q)) > ko.LOCAL_QUEUE_STATUS_FLAVORS_V0_17
    for q in _by(ko.kueue_objects(), "ClusterQueue").values():
        assert len(_queue_flavors(q)) <= ko.LOCAL_QUEUE_STATUS_FLAVORS_V0_17


def test_the_default_scope_refuses_a_catalog_that_outgrows_kueue_v0_17(tmp_path: Path) -> None:
    """One more offer on a default provider: the default bundle would pass 16 flavors, and
    `burst kueue` (make goldens) says so instead of writing queues without a status."""
    cat = _catalog(
        tmp_path,
        """
offers:
  - provider: aws
    region: ap-southeast-1
    gpu_type: b200
    instance: p6-b200.48xlarge
    gpus_per_instance: 8
    on_demand_usd_per_hour: {value: null, source: t, date: 2026}
    spot_usd_per_hour: {value: null, source: t, date: 2026}
    availability: {value: unknown, source: t, date: 2026}
""",
    )
    assert len(ko.rentable_flavors(cat, ko.default_providers())) > 16
    with pytest.raises(BadInputError) as err:
        ko.kueue_objects(cat)
    assert "more than 16" in _one_line(err)
    flavors = _by(ko.kueue_objects(cat, local_queue_status_64=True), "ResourceFlavor")
    assert "b200-ap-southeast-1-spot" in flavors


def _one_line(exc: pytest.ExceptionInfo[BadInputError]) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


def test_two_providers_one_region_name_is_one_error_line(tmp_path: Path) -> None:
    cat = _catalog(
        tmp_path,
        """
regions:
  - {provider: azure, region: me-central-1, area: {value: middle_east, source: t, date: 2026}}
offers:
  - provider: azure
    region: me-central-1
    gpu_type: h100
    instance: x
    gpus_per_instance: 8
    on_demand_usd_per_hour: {value: null, source: t, date: 2026}
    spot_usd_per_hour: {value: null, source: t, date: 2026}
    availability: {value: unknown, source: t, date: 2026}
""",
    )
    with pytest.raises(BadInputError) as err:
        _every(cat)
    assert "h100-me-central-1-spot" in _one_line(err)


def test_a_region_that_cannot_name_a_flavor_is_one_error_line(tmp_path: Path) -> None:
    cat = _catalog(
        tmp_path,
        """
regions:
  - {provider: aws, region: AP_Test_1, area: {value: southeast_asia, source: t, date: 2026}}
offers:
  - provider: aws
    region: AP_Test_1
    gpu_type: h100
    instance: x
    gpus_per_instance: 8
    on_demand_usd_per_hour: {value: null, source: t, date: 2026}
    spot_usd_per_hour: {value: null, source: t, date: 2026}
    availability: {value: unknown, source: t, date: 2026}
""",
    )
    with pytest.raises(BadInputError) as err:
        ko.kueue_objects(cat)
    assert "AP_Test_1" in _one_line(err)


def test_more_flavors_than_a_resource_group_holds_is_one_error_line(tmp_path: Path) -> None:
    offers = "".join(
        f"""
  - provider: aws
    region: ap-southeast-1
    gpu_type: g{i}
    instance: x
    gpus_per_instance: 8
    on_demand_usd_per_hour: {{value: null, source: t, date: 2026}}
    spot_usd_per_hour: {{value: null, source: t, date: 2026}}
    availability: {{value: unknown, source: t, date: 2026}}"""
        for i in range(ko.MAX_FLAVORS // 2)
    )
    with pytest.raises(BadInputError) as err:
        ko.kueue_objects(_catalog(tmp_path, "offers:" + offers))
    assert str(ko.MAX_FLAVORS) in _one_line(err)


def test_quotas_follow_the_teams_runs_at_once() -> None:
    objects = _every()
    queues = _by(objects, "ClusterQueue")
    teams = yaml.safe_load((REPO / "deploy" / "gpu-quota.yaml").read_text())["data"]
    assert set(queues) == set(teams)  # a ClusterQueue per team, named after it
    local = _by(objects, "LocalQueue")  # and its LocalQueue burst-<team>, in burst's namespace
    assert set(local) == {f"burst-{t}" for t in teams}
    for team in teams:
        assert local[f"burst-{team}"]["spec"]["clusterQueue"] == team
        assert local[f"burst-{team}"]["metadata"]["namespace"] == ko.NAMESPACE == "burst"

    def gpu(team: str, flavor: str) -> dict[str, Any]:
        (rg,) = queues[team]["spec"]["resourceGroups"]
        (f,) = [f for f in rg["flavors"] if f["name"] == flavor]
        return {r["name"]: r for r in f["resources"]}

    assert gpu("default", "h100-ap-southeast-3-spot")["nvidia.com/gpu"] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 8,
        "borrowingLimit": 8,
    }
    assert gpu("default", "h100-ap-southeast-3-ondemand")["nvidia.com/gpu"]["nominalQuota"] == 0
    r = gpu("ml-research", "h200-eu-north1-spotwithfloor")
    assert (r["nvidia.com/gpu"]["nominalQuota"], r["nvidia.com/gpu"]["borrowingLimit"]) == (16, 16)
    assert (r["cpu"]["nominalQuota"], r["memory"]["nominalQuota"]) == (192, "2560Gi")
    r = gpu("ml-research", "b200-asia-southeast1-ondemand")
    assert (r["nvidia.com/gpu"]["nominalQuota"], r["nvidia.com/gpu"]["borrowingLimit"]) == (8, 16)


def test_a_bad_quota_file_is_one_error_line(tmp_path: Path) -> None:
    quota = tmp_path / "gpu-quota.yaml"
    quota.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  ML_Research: '1'\n")
    with pytest.raises(BadInputError) as err:
        ko.team_quotas(quota)
    assert "ML_Research" in _one_line(err)
    quota.write_text("apiVersion: v1\nkind: ConfigMap\ndata:\n  research: 'two'\n")
    with pytest.raises(BadInputError) as err:
        ko.team_quotas(quota)
    assert "research" in _one_line(err)


def test_a_team_too_long_for_its_local_queue_is_one_error_line(tmp_path: Path) -> None:
    """The LocalQueue is burst-<team>, at most 63 characters: a team of 58 is refused, one of
    57 (the most `burst submit` takes) makes a LocalQueue of 63 in front of its ClusterQueue."""
    quota = tmp_path / "gpu-quota.yaml"
    quota.write_text(f"apiVersion: v1\nkind: ConfigMap\ndata:\n  {'a' * 58}: '1'\n")
    with pytest.raises(BadInputError) as err:
        ko.team_quotas(quota)
    assert "a" * 58 in _one_line(err) and f"at most {ko.TEAM_MAX} " in _one_line(err)
    team = "a" * ko.TEAM_MAX
    quota.write_text(f"apiVersion: v1\nkind: ConfigMap\ndata:\n  {team}: '1'\n")
    assert ko.team_quotas(quota) == {team: 1}
    (local,) = _by(ko.kueue_objects(teams=ko.team_quotas(quota)), "LocalQueue").values()
    assert local["metadata"]["name"] == f"burst-{team}" and len(f"burst-{team}") == 63
    assert local["spec"]["clusterQueue"] == team


def test_the_priority_classes_are_the_spec_s_bands_and_the_templates_enum() -> None:
    bands = {n: o["value"] for n, o in _by(ko.kueue_objects(), "WorkloadPriorityClass").items()}
    assert set(bands) == {f"burst-{p}" for p in Priority}
    for name in ("burst-train", "burst-regional"):
        wt = yaml.safe_load(
            (REPO / "burst" / "pipelines" / "compiled" / f"{name}.yaml").read_text()
        )
        (param,) = [p for p in wt["spec"]["arguments"]["parameters"] if p["name"] == "priority"]
        # Argo refuses another value at submission: a pod naming a WorkloadPriorityClass that
        # does not exist would never be admitted (after its GPUs were rented)
        assert {f"burst-{p}" for p in param["enum"]} == set(bands)
        assert param["value"] in param["enum"]


def test_burst_kueue_writes_the_files(burst_cli: Any, tmp_path: Path) -> None:
    out = tmp_path / "kueue"
    r = burst_cli(["kueue", "--out", out], env={"BURST_CATALOG": ""})
    assert r.returncode == 0, r.stderr
    for name, text in ko.render(ko.kueue_objects()).items():
        assert (out / name).read_text() == text
    r = burst_cli(["kueue", "--provider", "nowhere"], env={"BURST_CATALOG": ""})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    every = [a for p in PROVIDER_STACKS for a in ("--provider", p)]
    r = burst_cli(["kueue", *every], env={"BURST_CATALOG": ""})
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--local-queue-status-64" in r.stderr
    r = burst_cli(["kueue", *every, "--local-queue-status-64"], env={"BURST_CATALOG": ""})
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("kind: ResourceFlavor") == len(_by(_every(), "ResourceFlavor"))


def test_no_local_queue_is_named_default_and_train_pods_name_their_teams() -> None:
    """Kueue's LocalQueueDefaulting (on in v0.17) puts every pod of a managed namespace that
    names no queue into a LocalQueue called `default`: with the team `default` queue so named,
    every step pod was admitted under a GPU flavor and pinned to GPU nodes, so no step but train
    scheduled on the cluster's own nodes (the engines tier found it). Each team's LocalQueue is
    burst-<team>, and that is what the run's Workload names (burst.admission.kueue_workload;
    the train pods carry no queue label)."""
    from burst.admission.kueue_objects import kueue_objects, local_queue_name, team_quotas
    from burst.admission.kueue_workload import workload_body
    from burst.documents.plan import Candidate
    from burst.pipelines.common import kueue_labels
    from burst.spec import load_spec

    queues = {o["metadata"]["name"] for o in kueue_objects() if o["kind"] == "LocalQueue"}
    assert "default" not in queues
    assert kueue_labels() == {}
    job = load_spec(Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml")
    cand = Candidate(region="ap-southeast-3", provider="aws", capacity="spot", gpu_type="h100")
    for team in team_quotas():
        named = workload_body(job.model_copy(update={"team": team}), "r", cand, "burst")
        queue = named["spec"]["queueName"]
        assert queue == local_queue_name(team) and queue in queues
