"""The burst-regional WorkflowTemplate (burst/pipelines/burst_regional.py, golden
burst/pipelines/compiled/burst-regional.yaml): its graph, and what the local run takes from it.
The three offline checks (round trip, strict schema, lint) run on every golden in
tests/manifests; these tests read the graph itself."""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.documents import Candidate, PlanDocument
from burst.errors import BadInputError
from burst.pipelines.common import RETRY_ON_PREEMPTION
from burst.runner import expr
from burst.runner.lint import lint

from .regional_specs import REPO, TWO, regional_spec

GOLDEN = REPO / "burst" / "pipelines" / "compiled" / "burst-regional.yaml"


def _manifest() -> dict[str, Any]:
    return dict(yaml.safe_load(GOLDEN.read_text()))


def _templates(doc: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in doc["spec"]["templates"]}


def _args(call: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["value"] for p in call["arguments"]["parameters"]}


def test_main_fans_out_one_branch_per_region() -> None:
    doc = _manifest()
    t = _templates(doc)
    main = [[s["name"] for s in group] for group in t["main"]["steps"]]
    assert main == [["preflight"], ["plan"], ["verify-image"], ["stacks"], ["regions"]]
    # the barrier: every region's stack in one group (burst-train's provision step), before
    # any branch starts
    (stacks,) = t["main"]["steps"][3]
    assert stacks["template"] == "provision"
    assert stacks["withParam"] == "{{workflow.parameters.regions}}"
    assert _args(stacks)["region"] == "{{item}}"
    (regions,) = t["main"]["steps"][4]
    assert regions["template"] == "place"
    assert regions["withParam"] == "{{workflow.parameters.regions}}"
    assert _args(regions)["region"] == "{{item}}"
    # a branch is burst-train's place branch in one region: provision, the region's own
    # identity (its service account and binding), then train (the worker) and, in the
    # aggregation region only, aggregate, both as that identity
    branch = t["place"]["steps"]
    assert [[s["name"] for s in g] for g in branch] == [
        ["provision"],
        ["service-account", "role-binding"],
        ["train", "aggregate"],
    ]
    assert branch[0][0]["template"] == "provision"
    worker, aggregator = branch[2]
    for step in ("train", "aggregate"):
        assert (
            t[step]["serviceAccountName"] == "burst-{{workflow.name}}-{{inputs.parameters.region}}"
        )
    assert "when" not in worker
    assert "aggregation-region" in aggregator["when"]
    # no side channel: train gets provision's document and the plan, as burst-train's train
    assert _args(worker)["infra"] == "{{steps.provision.outputs.parameters.infra}}"
    assert _args(worker)["plan"] == _args(aggregator)["plan"] == "{{inputs.parameters.plan}}"
    # every pod of a branch names its region (the local runner gives it that region's keys)
    for role in (worker, aggregator):
        assert _args(role)["region"] == "{{inputs.parameters.region}}"


def test_every_template_runs_a_step_of_the_one_contract() -> None:
    """No step module of its own: every container of burst-regional runs one of burst's
    steps (``burst.stepio``: --spec, --run-id, --out), and the steps' modules are those of
    burst-train plus aggregate."""
    train = {
        t["name"]: t
        for t in yaml.safe_load((GOLDEN.parent / "burst-train.yaml").read_text())["spec"][
            "templates"
        ]
    }
    for name, t in _templates(_manifest()).items():
        if "container" not in t:
            continue
        command, args = t["container"]["command"], t["container"]["args"]
        assert command == ["python", "-m", f"burst.steps.{name.replace('-', '_')}"]
        assert {"--spec", "--run-id", "--out"} <= set(args), name
        if name != "aggregate":
            assert train[name]["container"]["command"] == command, name


def test_exit_handler_tears_every_region_down_from_its_stack_id() -> None:
    doc = _manifest()
    t = _templates(doc)
    assert doc["spec"]["onExit"] == "exit-handler"
    (group,) = t["exit-handler"]["steps"]
    (teardown,) = group
    assert teardown["withParam"] == "{{workflow.parameters.regions}}"
    assert _args(teardown) == {"region": "{{item}}"}
    td = t["teardown"]
    assert td["retryStrategy"]["retryPolicy"] == "Always" and int(td["retryStrategy"]["limit"]) >= 3
    stack_id = "{{workflow.name}}-{{inputs.parameters.region}}"
    for name in ("teardown", "provision", "train", "aggregate"):
        args = t[name]["container"]["args"]
        assert args[args.index("--run-id") + 1] == stack_id, name
    for name in ("provision", "train", "aggregate"):
        env = {e["name"]: e["value"] for e in t[name]["container"]["env"]}
        assert env["BURST_REGION"] == "{{inputs.parameters.region}}", name


def _retried(expression: str, exit_code: str, message: str = "") -> bool:
    last = {"exitCode": exit_code, "status": "Failed", "message": message, "duration": "1"}
    return bool(expr.evaluate(expr.parse(expression), {"lastRetry": last}))


def test_roles_are_restarted_as_the_local_run_restarts_them() -> None:
    """The local run executes this very retryStrategy (burst.runner.engine), so what the
    template retries is what the local run retries."""
    doc = _manifest()
    t = _templates(doc)
    for name in ("train", "aggregate"):
        rs = t[name]["retryStrategy"]
        assert rs["limit"] == "{{workflow.parameters.restarts}}"
        assert rs["expression"] == RETRY_ON_PREEMPTION
        assert t[name]["container"]["command"] == [
            "python",
            "-m",
            f"burst.steps.{name.replace('-', '_')}",
        ]
    params = {p["name"]: p.get("value") for p in doc["spec"]["arguments"]["parameters"]}
    assert params["restarts"] == "3"
    # preempted (75), infrastructure (4), a lost node (-1, pod deleted) are retried
    assert all(_retried(RETRY_ON_PREEMPTION, rc) for rc in ("75", "4"))
    assert _retried(RETRY_ON_PREEMPTION, "-1", "pod deleted")
    assert not any(_retried(RETRY_ON_PREEMPTION, rc) for rc in ("1", "2", "3"))


def test_item_outside_a_loop_fails_the_lint() -> None:
    broken = copy.deepcopy(_manifest())
    (group,) = _templates(broken)["exit-handler"]["steps"]
    del group[0]["withParam"]
    assert any("{{item}} used outside" in p for p in lint(broken))


def _provision(
    tmp_path: Path, region: str, *inputs: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    spec = regional_spec(tmp_path, TWO)
    args = [sys.executable, "-m", "burst.steps.provision", "--spec", str(spec)]
    args += ["--run-id", f"wf-{region}", "--runs-root", str(tmp_path / "runs")]
    for i in inputs:
        args += ["--input", i]
    base = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "BURST_REGION": region}
    return subprocess.run(
        args, capture_output=True, text=True, cwd=REPO, env={**base, **(env or {})}, timeout=120
    )


def test_regional_provision_refuses_a_region_not_in_the_spec(tmp_path: Path) -> None:
    proc = _provision(tmp_path, "eu-west-1")
    assert proc.returncode == 2, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst provision")]
    assert "BURST_REGION 'eu-west-1' is not one of" in line and "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").rglob("*.tfstate"))


def test_regional_provision_refuses_without_a_decision_record(tmp_path: Path) -> None:
    proc = _provision(tmp_path, "me-central-1")
    assert proc.returncode == 3, proc.stderr
    assert "decision record" in proc.stderr and "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").rglob("*.tfstate"))  # nothing applied


@pytest.mark.e2e
def test_a_regions_provision_on_a_cluster_reads_kueue_before_renting(tmp_path: Path) -> None:
    """A region's branch runs burst-train's provision, Kueue's flavor gate included (issue
    47: regional-provision had none): in an Argo pod whose API server cannot be read it exits
    4 in one line, the decision record allowing the region, nothing applied."""
    from burst.policy import evaluate, load_policies
    from burst.spec import load_spec

    spec = regional_spec(tmp_path, TWO)
    plan, decision = tmp_path / "plan.json", tmp_path / "decision.json"
    cand = Candidate(region="me-central-1", provider="aws", capacity="spot")
    plan.write_text(json.dumps({"candidates": [cand.to_json()]}))
    decision.write_text(json.dumps(evaluate(load_spec(spec), load_policies()).to_json()))
    cluster = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": "9"}
    cluster["ARGO_NODE_ID"] = "wf-1"
    proc = _provision(tmp_path, "me-central-1", f"plan={plan}", f"decision={decision}", env=cluster)
    assert proc.returncode == 4, proc.stderr
    (line,) = [ln for ln in proc.stderr.splitlines() if ln.startswith("burst provision")]
    assert "to read Kueue's queues" in line, line
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "runs").rglob("*.tfstate"))  # nothing applied


def test_submit_of_a_regional_spec_calls_the_regional_template(tmp_path: Path) -> None:
    """`burst submit` of a regional-sync spec: burst-regional, the regions as the JSON list
    the fan-out and the exit handler loop over, only parameters the golden declares."""
    from burst.runner.argo import build_workflow

    spec = regional_spec(tmp_path, TWO)
    pinned = "ghcr.io/example/trainer@sha256:" + "a" * 64  # Argo pulls from a registry
    text = spec.read_text()
    ref = next(ln for ln in text.splitlines() if ln.strip().startswith("reference:"))
    spec.write_text(text.replace(ref, f"  reference: {pinned}"))
    wf = build_workflow(spec)
    assert wf["spec"]["workflowTemplateRef"] == {"name": "burst-regional"}
    params = {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}
    assert json.loads(params["regions"]) == list(TWO)
    assert params["aggregation-region"] == "ap-southeast-1"
    # no trainer image: the workers run the digest verify-image verified from the spec
    assert "trainer-image" not in params
    declared = {p["name"] for p in _manifest()["spec"]["arguments"]["parameters"]}
    assert set(params) <= declared
    assert {"spec", "regions", "aggregation-region"} <= set(params)


@pytest.mark.e2e
def test_a_branchs_steps_provision_then_tear_down_one_region(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The template's containers, run here in order (in process, with the local stack):
    preflight -> plan -> provision (BURST_REGION, the region's stack id) -> teardown from that
    stack id alone. The role config is the one the branch's train step derives from the
    plan and provision's document."""
    from burst.plan.regional import role_config
    from burst.settings import Settings, use
    from burst.spec import load_spec
    from burst.steps import plan, preflight, provision, teardown

    spec = REPO / "examples" / "regional.yaml"
    out, runs = tmp_path / "outputs", tmp_path / "runs"
    for name in ("BURST_STEP", "BURST_RUN_ID"):  # stepio sets them: restored afterwards
        monkeypatch.setenv(name, "")
    monkeypatch.setenv("BURST_TF_STACK", "local")
    monkeypatch.setenv("BURST_REGION", "me-central-1")
    stack = "wf-me-central-1"

    def step(module: Any, name: str, run_id: str, *inputs: str) -> dict[str, Any]:
        argv = ["--spec", str(spec), "--run-id", run_id, "--runs-root", str(runs)]
        for i in inputs:
            argv += ["--input", f"{i}={out / f'{i}.json'}"]
        doc = out / f"{name}.json"
        assert module.main(name, module.run, [*argv, "--out", str(doc)]) == 0, name
        return dict(json.loads(doc.read_text()))

    step(preflight, "preflight", "wf")
    (out / "preflight.json").rename(out / "decision.json")
    planned = step(plan, "plan", "wf", "decision")
    infra = step(provision, "provision", stack, "plan", "decision")
    assert infra["status"] == "provisioned" and infra["candidate"]["region"] == "me-central-1"
    assert infra["outputs"]["node_group_name"] == f"burst-{stack}"
    # the region's share of the budget, admitted before it rented
    assert infra["admission"]["reserved_usd"] > 0
    assert (runs / stack / "region").read_text().strip() == "me-central-1"
    job = load_spec(spec)
    with use(Settings.from_env()):
        cfg = role_config(
            job,
            "worker",
            stack_id=stack,
            runs_root=runs,
            spec_path=spec,
            plan=PlanDocument.model_validate(planned),
            region_uri=infra["outputs"]["checkpoint_uri"],
        )
        with pytest.raises(BadInputError, match="the aggregator runs in ap-southeast-1"):
            role_config(
                job, "aggregator", stack_id=stack, runs_root=runs, spec_path=spec, plan=None
            )
    assert cfg.region == "me-central-1" and cfg.role == "worker"
    assert cfg.local_steps == planned["regional"]["local_steps"] == 4 and cfg.rounds == 3
    assert cfg.exchange_store["root"].endswith("/wf/exchange")  # the spec's store, by workflow
    assert cfg.region_store is not None and cfg.region_store["region"] == "me-central-1"
    assert cfg.run_dir == str(runs / "wf") and cfg.run_id == "wf"  # the run's, not the stack's
    down = step(teardown, "teardown", stack)
    assert down["destroyed"] and down["resources_remaining"] == 0 and down["leaks"] == []
