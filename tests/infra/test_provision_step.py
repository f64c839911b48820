"""The provision step as the pipeline runs it (a process), and through `burst run`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from burst.documents.plan import Candidate
from burst.infra.terraform import count_state_resources
from burst.spec import BurstJob

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def _step(
    runs_root: Path,
    spec: Path,
    run_id: str,
    inputs: dict[str, Any],
    env: dict[str, str] | None = None,
) -> tuple[int, dict[str, Any] | None, str]:
    argv = [
        sys.executable,
        "-m",
        "burst.steps.provision",
        "--spec",
        str(spec),
        "--run-id",
        run_id,
        "--runs-root",
        str(runs_root),
        "--out",
        str(runs_root / f"{run_id}.provision.json"),
    ]
    for name, doc in inputs.items():
        path = runs_root / f"{run_id}.{name}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc))
        argv += ["--input", f"{name}={path}"]
    proc = subprocess.run(
        argv, capture_output=True, text=True, check=False, env={**os.environ, **(env or {})}
    )
    out = runs_root / f"{run_id}.provision.json"
    return proc.returncode, json.loads(out.read_text()) if out.exists() else None, proc.stderr


def _plan(candidates: list[Candidate]) -> dict[str, Any]:
    return {"candidates": [c.to_json() for c in candidates]}


def test_refuses_without_a_decision_record(
    runs_root: Path, quickstart_in: Path, candidates: list[Candidate]
) -> None:
    code, _, err = _step(runs_root, quickstart_in, "nodec", {"plan": _plan(candidates)})
    assert code == 3, err
    assert "decision record" in err and "Traceback" not in err
    assert count_state_resources(runs_root / "nodec" / "terraform" / "terraform.tfstate") == 0
    assert not (runs_root / "nodec" / "terraform" / "main.tf").exists()


def test_refuses_a_record_for_another_spec(
    runs_root: Path, quickstart_in: Path, candidates: list[Candidate], decision: dict[str, Any]
) -> None:
    stale = {**decision, "spec_sha256": "0" * 64}
    code, _, err = _step(
        runs_root, quickstart_in, "stale", {"plan": _plan(candidates), "decision": stale}
    )
    assert code == 3
    assert "not this spec" in err
    assert not (runs_root / "stale" / "terraform" / "main.tf").exists()


def test_only_allowed_candidates_are_attempted(
    runs_root: Path, quickstart_in: Path, candidates: list[Candidate], decision: dict[str, Any]
) -> None:
    edited = json.loads(json.dumps(decision))
    for d in edited["decisions"]:
        if d["region"] == "ap-southeast-1":
            d["verdict"] = "review"
    code, doc, err = _step(
        runs_root, quickstart_in, "gate", {"plan": _plan(candidates), "decision": edited}
    )
    assert code == 0, err
    assert doc is not None
    assert [a["region"] for a in doc["attempts"]] == ["ap-southeast-3"]
    assert doc["refused"][0]["region"] == "ap-southeast-1"
    assert "review" in doc["refused"][0]["reason"]
    assert doc["decision"]["spec_sha256"] == decision["spec_sha256"]
    assert doc["admission"]["team"] == "ml-research"  # reserved in the ledger before renting
    assert doc["admission"]["reserved_usd"] > 0
    assert doc["admission"]["ledger"] == (runs_root / "ledger").resolve().as_uri()
    teardown = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.teardown",
            "--spec",
            str(quickstart_in),
            "--run-id",
            "gate",
            "--runs-root",
            str(runs_root),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert teardown.returncode == 0, teardown.stderr
    from burst.admission.ledger import Ledger

    settled = Ledger.open((runs_root / "ledger").as_uri()).entry("ml-research", "gate")
    assert settled is not None and settled.state == "settled"
    assert settled.actual_usd == 0  # it never trained: nothing charged


def test_a_run_over_its_team_budget_is_refused_before_anything_is_rented(
    runs_root: Path, quickstart_in: Path, candidates: list[Candidate], decision: dict[str, Any]
) -> None:
    from burst.admission.ledger import Ledger

    ledger = Ledger.open((runs_root / "ledger").as_uri())
    ledger.set_teams("teams:\n  ml-research:\n    day: {usd: 1}\n", "teams.yaml")
    inputs = {"plan": _plan(candidates), "decision": decision}
    code, _, err = _step(runs_root, quickstart_in, "poor", inputs)
    assert code == 3, err
    lines = [x for x in err.splitlines() if "team ml-research" in x]
    assert len(lines) == 1 and "Traceback" not in err
    assert "day budget has $1.00 of $1.00 left" in lines[0]
    assert "run poor reserves $" in lines[0]
    assert not (runs_root / "poor" / "terraform" / "main.tf").exists()
    assert count_state_resources(runs_root / "poor" / "terraform" / "terraform.tfstate") == 0
    refused = ledger.entry("ml-research", "poor")
    assert refused is not None and refused.state == "refused"


def test_failover_document_and_idempotent_rerun(
    runs_root: Path,
    quickstart_in: Path,
    candidates: list[Candidate],
    decision: dict[str, Any],
    job: BurstJob,
) -> None:
    env = {"BURST_SIMULATE_NO_CAPACITY": "ap-southeast-1,ap-southeast-3"}
    inputs = {"plan": _plan(candidates), "decision": decision}
    code, doc, err = _step(runs_root, quickstart_in, "fo", inputs, env)
    assert code == 0, err
    assert doc is not None
    assert [a["result"] for a in doc["attempts"]] == ["capacity", "capacity", "ok"]
    assert doc["outputs"]["region"] == "me-central-1"
    assert doc["terraform"]["kind"] == "local"
    assert doc["step"] == "provision" and doc["run_id"] == "fo"

    code, again, err = _step(runs_root, quickstart_in, "fo", inputs, env)
    assert code == 0, err
    assert again is not None
    assert again["changes"] == {"add": 0, "change": 0, "remove": 0}
    assert len(again["attempts"]) == 1
    subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.teardown",
            "--spec",
            str(quickstart_in),
            "--run-id",
            "fo",
            "--runs-root",
            str(runs_root),
        ],
        check=True,
        capture_output=True,
    )


@pytest.mark.slow
def test_burst_run_fails_over_and_reports_attempts(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str], tmp_path: Path
) -> None:
    """`burst run` with no capacity in the plan's first two candidates provisions in the
    third; the report lists the attempts; nothing is left of any attempt.

    With BURST_TF_SITE_VARS a directory of <region>.tfvars (issue 19's Done-when,
    docs/topology.md), the local stack takes the candidate's file as a cloud stack would:
    each attempt applies its own region's file, the node group the run trains on records the
    values of the region it stands in, and teardown destroys with the file of the last apply."""
    # the plan's candidates for this spec, from the real plan step
    pre = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "probe", "--fail-at", "verify-image"],
        capture_output=True,
        text=True,
    )
    assert pre.returncode == 1, pre.stderr
    plan = json.loads((runs_root / "probe" / "docs" / "plan.json").read_text())["candidates"]
    # no capacity in the regions of the first two candidates (the emulation is per region, so
    # every candidate in those regions fails); the run lands in the first other region
    first_two = {c["region"] for c in plan[:2]}
    failing = [c for c in plan if c["region"] in first_two]
    landing = next(c for c in plan if c["region"] not in first_two)
    expected = [c["region"] for c in plan[: plan.index(landing) + 1]]
    assert len(expected) >= 3
    sites = tmp_path / "sites"
    sites.mkdir()
    for region in {c["region"] for c in plan}:
        (sites / f"{region}.tfvars").write_text(
            f'vpc_id     = "vpc-{region}"\nsubnet_ids = ["subnet-{region}-a"]\n'
            f'vpn = {{ customer_gateway_ip = "198.51.100.10", control_network_cidrs = ["10.20.0.0/16"] }}\n'
        )

    env = {
        **os.environ,
        "BURST_SIMULATE_NO_CAPACITY": ",".join(sorted(first_two)),
        "BURST_TF_SITE_VARS": str(sites),
    }
    proc = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "failover"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = json.loads((runs_root / "failover" / "report.json").read_text())
    attempts = report["provision_attempts"]
    assert [a["region"] for a in attempts] == expected
    assert [a["result"] for a in attempts] == ["capacity"] * (len(expected) - 1) + ["ok"]
    assert len(failing) >= 2 and attempts[-1]["region"] == landing["region"]
    assert all(a["cleanup"]["resources_remaining"] == 0 for a in attempts[:-1])
    assert report["status"] == "succeeded"
    assert report["resources_remaining"] == 0
    assert count_state_resources(runs_root / "failover" / "terraform" / "terraform.tfstate") == 0
    # each attempt applied its own region's site file; the node group records the landing's
    doc = json.loads((runs_root / "failover" / "docs" / "provision.json").read_text())
    for a in doc["attempts"]:
        assert a["site_vars"] == f"{a['region']}.tfvars", a
    site = {k: json.loads(v) for k, v in doc["outputs"]["site"].items()}
    assert site["vpc_id"] == f"vpc-{landing['region']}"
    assert site["subnet_ids"] == [f"subnet-{landing['region']}-a"]
    assert site["vpn"]["control_network_cidrs"] == ["10.20.0.0/16"]
    # teardown destroyed with the file of the last apply (recorded for the run id alone)
    record = json.loads((Path(doc["terraform_dir"]) / "workspace.json").read_text())
    assert Path(record["site_vars"]).name == f"{landing['region']}.tfvars"


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"BURST_WORKFLOW_TEAM": "another-team"}, "team parameter is 'another-team'"),
        ({"BURST_WORKFLOW_PRIORITY": "critical"}, "priority parameter is 'critical'"),
    ],
)
def test_refuses_a_workflow_whose_team_or_priority_is_not_the_specs(
    runs_root: Path,
    quickstart_in: Path,
    candidates: list[Candidate],
    decision: dict[str, Any],
    env: dict[str, str],
    named: str,
) -> None:
    """A hand-made `argo submit -p team=...` would queue, be charged and preempt as one team
    while provision admits it as the spec's: refused before anything is rented (issue 47)."""
    code, _, err = _step(
        runs_root,
        quickstart_in,
        "ident",
        {"plan": _plan(candidates), "decision": decision},
        env={"BURST_WORKFLOW_TEAM": "ml-research", "BURST_WORKFLOW_PRIORITY": "normal", **env},
    )
    assert code == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert named in lines[-1] and "nothing was rented" in lines[-1], err
    assert "Traceback" not in err
    assert not (runs_root / "ident" / "terraform" / "main.tf").exists()
