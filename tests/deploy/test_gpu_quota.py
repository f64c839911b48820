"""Every template that rents GPUs holds its team's GPU quota (deploy/gpu-quota.yaml): a
workflow-level semaphore keyed by the team (Argo workflow/sync: the workflow waits, Pending,
until a slot of ``configMapKeyRef`` is free, and holds it until it ends), and `burst submit`
passes the spec's team. Walk: docs/reference/walk-burst-regional.md (burst-regional held
none: a team's regional runs, which rent GPUs in every region, ignored the quota)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).resolve().parent / "before"
RENTING = ("burst-train", "burst-regional")


def quota_problems(manifest: dict[str, Any], quota: dict[str, Any]) -> list[str]:
    name = manifest["metadata"]["name"]
    spec = manifest["spec"]
    sems = (spec.get("synchronization") or {}).get("semaphores") or []
    refs = [s.get("configMapKeyRef") or {} for s in sems]
    if not any(
        r.get("name") == quota["metadata"]["name"]
        and r.get("key") == "{{workflow.parameters.team}}"
        for r in refs
    ):
        return [f"{name} holds no {quota['metadata']['name']} semaphore keyed by its team"]
    params = {p["name"]: p.get("value") for p in spec["arguments"]["parameters"]}
    if params.get("team") not in quota["data"]:
        return [f"{name}: its default team {params.get('team')!r} has no quota key"]
    return []


def _quota() -> dict[str, Any]:
    return yaml.safe_load((REPO / "deploy" / "gpu-quota.yaml").read_text(encoding="utf-8"))  # type: ignore[no-any-return]


@pytest.mark.parametrize("name", RENTING)
def test_every_renting_template_holds_the_quota(name: str) -> None:
    doc = yaml.safe_load((REPO / "deploy" / "argo" / f"{name}.yaml").read_text(encoding="utf-8"))
    assert quota_problems(doc, _quota()) == []


def test_before_the_walk_burst_regional_held_none() -> None:
    doc = yaml.safe_load(
        (BEFORE / "pipelines_compiled_burst-regional.yaml").read_text(encoding="utf-8")
    )
    assert quota_problems(doc, _quota())


def test_submit_passes_the_specs_team_to_burst_regional() -> None:
    from burst.runner.argo import regional_parameters
    from burst.spec import parse_spec

    text = (REPO / "examples" / "regional.yaml").read_text(encoding="utf-8")
    job = parse_spec(text)
    job = job.model_copy(
        update={
            "image": job.image.model_copy(update={"reference": "ghcr.io/a/b@sha256:" + "1" * 64})
        }
    )
    params = regional_parameters(job, text)
    assert params["team"] == job.team
    assert params["cost-centre"] == job.cost_centre and params["owner"] == job.owner
