"""One capacity vocabulary: every kind of candidate the planner emits passes the stacks'
variable validation, evaluated by real Terraform.

The plan is made for real (quickstart spec, a user catalog with a spot price, an on-demand
floor), each candidate is rendered into the variables a stack takes exactly as provision
renders them (``Workspace.variables``), and Terraform plans a root module holding only the
stack's ``variables.tf`` with those variable files: the validation blocks run, no provider is
needed. A candidate capacity outside the vocabulary is refused the same way.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.infra.provision import node_count
from burst.infra.terraform import REPO_ROOT
from burst.infra.workspace import Workspace
from burst.plan.catalog import load_catalog
from burst.plan.placement import CANDIDATE_CAPACITIES, PlanOptions, plan
from burst.spec import parse_spec

pytestmark = pytest.mark.e2e

STACKS = {
    "local": REPO_ROOT / "terraform" / "modules" / "local-nodegroup",
    "aws": REPO_ROOT / "terraform" / "stacks" / "burst-run",
    "gcp": REPO_ROOT / "terraform" / "stacks" / "gcp-run",
    "azure": REPO_ROOT / "terraform" / "stacks" / "azure-run",
    "nebius": REPO_ROOT / "terraform" / "stacks" / "nebius-run",
}
# where each stack's candidates are planned (a catalog offer of that provider)
WHERE = {
    "local": ("aws", "ap-southeast-3"),
    "aws": ("aws", "ap-southeast-3"),
    "gcp": ("gcp", "asia-southeast1"),
    "azure": ("azure", "uaenorth"),
    "nebius": ("nebius", "eu-north1"),
}
TAGS = {
    "burst:run-id": "vocab",
    "burst:expires-at": "2030-01-01T00:00:00Z",
    "burst:owner": "alice",
    "burst:team": "ml",
    "burst:cost-centre": "cc-1",
    "burst:priority": "normal",
}


def _candidates(tmp_path: Path, stack: str = "aws") -> tuple[Any, list[dict[str, Any]]]:
    provider, region = WHERE[stack]
    quick = yaml.safe_load((REPO_ROOT / "examples" / "quickstart.yaml").read_text())
    quick["training"].update(step_seconds=3600.0, steps=40, checkpoint={"interval_steps": "auto"})
    quick["budget"].update(max_hours=100, max_usd=50000)
    quick["model"]["parameters"] = 7e9
    quick["compute"].update(gpu_count=32, regions=[region], providers=[provider])
    job = parse_spec(yaml.safe_dump(quick), "<vocabulary spec>")
    user = tmp_path / "spot.yaml"
    user.write_text(
        "offers:\n  - provider: aws\n    region: ap-southeast-3\n    gpu_type: h100\n"
        "    spot_usd_per_hour: {value: 30.0, source: 'test quote', date: 2026-11}\n"
    )
    doc = plan(
        job, load_catalog([user], use_env=False), opts=PlanOptions(replicas=8, floor_nodes=1)
    )
    return job, doc["candidates"]


def _validation_root(tmp_path: Path, stack: str) -> Path:
    root = tmp_path / f"validate-{stack}"
    root.mkdir()
    shutil.copy(STACKS[stack] / "variables.tf", root / "variables.tf")
    (root / "main.tf").write_text('terraform {\n  required_version = ">= 1.10.0"\n}\n')
    return root


def _render(stack: str, job: Any, cand: dict[str, Any], workdir: Path) -> list[Path]:
    site = None if stack == "local" else STACKS[stack] / "site.tfvars.example"
    ws = Workspace(stack, "vocab", workdir, {}, site)
    variables = ws.variables(
        run_id="vocab",
        candidate=cand,
        gpu_type=job.compute.gpu_type,
        node_count=node_count(job),
        tags=TAGS,
    )
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "burst.auto.tfvars.json").write_text(json.dumps(variables))
    return [f for f in ws.var_files(cand["region"]) if f.exists()]


def _plan(tf: Any, root: Path, files: list[Path]) -> Any:
    args = ["plan", "-input=false", "-no-color", "-lock=false"]
    if 'variable "vpn_shared_secret"' in (root / "variables.tf").read_text():
        args.append("-var=vpn_shared_secret=test-only")  # TF_VAR_ from a secret store in a run
    return tf(*args, *[f"-var-file={f}" for f in files], chdir=root)


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_every_candidate_capacity_passes_the_stack_validation(
    tf: Any, tmp_path: Path, stack: str
) -> None:
    job, cands = _candidates(tmp_path, stack)
    assert {c["provider"] for c in cands} == {WHERE[stack][0]}
    emitted = {c["capacity"] for c in cands}
    assert emitted == set(CANDIDATE_CAPACITIES), emitted  # the planner emits every kind
    root = _validation_root(tmp_path, stack)
    assert tf("init", "-input=false", "-no-color", chdir=root).returncode == 0
    for cand in cands:
        files = _render(stack, job, cand, tmp_path / "runs" / cand["capacity"])
        out = _plan(tf, root, files)
        sys.stderr.write(f"{stack} {cand['capacity']}: rc={out.returncode}\n")
        assert out.returncode == 0, f"{cand['capacity']}: {out.stdout}{out.stderr}"


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_a_capacity_outside_the_vocabulary_is_refused(tf: Any, tmp_path: Path, stack: str) -> None:
    job, cands = _candidates(tmp_path, stack)
    floor = next(c for c in cands if c["capacity"] == "spot_with_floor")
    root = _validation_root(tmp_path, stack)
    assert tf("init", "-input=false", "-no-color", chdir=root).returncode == 0
    # the spec's policy name is not a candidate capacity
    files = _render(stack, job, {**floor, "capacity": "spot_with_fallback"}, tmp_path / "bad")
    out = _plan(tf, root, files)
    assert out.returncode != 0
    assert "capacity must be spot, on_demand or spot_with_floor" in out.stderr
    if stack != "local":  # a floor as large as the whole node count is refused too
        files = _render(stack, job, {**floor, "floor_nodes": node_count(job)}, tmp_path / "f")
        out = _plan(tf, root, files)
        assert out.returncode != 0 and "on_demand_floor must be" in out.stderr
