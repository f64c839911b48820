"""Issue 19's defects of the burst-train manifest, each checked on the manifest as it was
before the fix (tests/data/burst-train.before-issue-19.yaml, the golden of commit 344b841)
and on the committed golden: the check finds the defect in the old one and not in the new.

The checks follow the engines' own rules: Argo's retry and variable semantics
(workflow/controller/operator.go, steps.go), Kubernetes' Pod Security Standards
("restricted", https://kubernetes.io/docs/concepts/security/pod-security-standards/) and
scheduling (extended resources, node affinity), as cited in docs/pipelines.md.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.runner import expr
from burst.runner.engine import EngineOptions, ManifestError, WorkflowEngine
from burst.runner.lint import lint
from burst.runner.tags import substitute

from .conftest import COMPILED

OLD = Path(__file__).resolve().parents[1] / "data" / "burst-train.before-issue-19.yaml"
TRAIN_ONLY = {"train"}  # the one pod that runs on the rented (tainted, maybe spot) nodes


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _templates(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in m["spec"]["templates"]}


def _pods(m: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: t for n, t in _templates(m).items() if "container" in t}


# -- the checks: each returns the problems it finds ---------------------------------------
def backoff_problems(m: dict[str, Any]) -> list[str]:
    """1. maxDuration counts from the first attempt's start and is every retried pod's
    deadline (operator.go processNodeRetries: maxDurationDeadline, opts.executionDeadline)."""
    out = []
    for name, t in _templates(m).items():
        backoff = (t.get("retryStrategy") or {}).get("backoff") or {}
        if "maxDuration" in backoff:
            out.append(f"{name}: backoff.maxDuration {backoff['maxDuration']} ends retries")
        if t.get("retryStrategy") and backoff and "cap" not in backoff:
            out.append(f"{name}: exponential backoff without a cap")
    return out


def missing_variable_problems(m: dict[str, Any]) -> list[str]:
    """2. what Argo >= 3.7.11 / 4.0.2 would requeue forever (burst.runner.lint's rule)."""
    return [p for p in lint(m) if "requeues this step forever" in p]


def artifact_repository_problems(m: dict[str, Any]) -> list[str]:
    """3. output artifacts need an artifact repository the cluster may not have."""
    opts = EngineOptions(workflow_name="w", volumes={"burst-runs": Path("/nonexistent")})
    try:
        WorkflowEngine(m, opts).check()
    except ManifestError as exc:
        return [exc.message] if "artifact repository" in exc.message else []
    return []


def gpu_problems(m: dict[str, Any]) -> list[str]:
    """4. a GPU is an extended resource: without a request (== limit) the pod gets none. The
    request is the container's resources with the podSpecPatch's main container over them
    (where the parameter must live: test_resource_quantities_are_literal_...)."""
    t = _templates(m)["train"]
    res = json.loads(json.dumps(t["container"].get("resources") or {}))
    patch_text = str(t.get("podSpecPatch") or "")
    if patch_text:
        text = re.sub(r"\{\{inputs\.parameters\.[a-z-]+\}\}", "{}", patch_text)
        text = text.replace('"tolerations": {}', '"tolerations": []')
        for c in json.loads(text).get("containers") or []:
            if c.get("name") == "main":
                for kind, values in (c.get("resources") or {}).items():
                    res.setdefault(kind, {}).update(values)
    want = "{{workflow.parameters.gpus-per-node}}"
    out = []
    for kind in ("requests", "limits"):
        if (res.get(kind) or {}).get("nvidia.com/gpu") != want:
            out.append(f"train: resources.{kind} has no nvidia.com/gpu = gpus-per-node")
    return out


def scheduling_problems(m: dict[str, Any]) -> list[str]:
    """5. stable pods must schedule on any cluster: no selector on a label only EKS managed
    node groups carry; the exit handler's pod has a deadline of its own."""
    out = []
    for name, t in _pods(m).items():
        for key in t.get("nodeSelector") or {}:
            out.append(f"{name}: nodeSelector on {key} (only some node pools carry it)")
        if name in TRAIN_ONLY:
            continue
        terms = (
            ((t.get("affinity") or {}).get("nodeAffinity") or {})
            .get("requiredDuringSchedulingIgnoredDuringExecution", {})
            .get("nodeSelectorTerms", [])
        )
        ops = {e["operator"] for term in terms for e in term.get("matchExpressions", [])}
        if not terms or ops != {"NotIn"}:
            out.append(f"{name}: not kept off spot capacity by NotIn node affinity")
    handler = _templates(m)[m["spec"]["onExit"]]
    for group in handler["steps"]:
        for step in group:
            if "activeDeadlineSeconds" not in _templates(m)[step["template"]]:
                out.append(f"exit handler step {step['name']}: no deadline of its own")
    return out


def volume_problems(m: dict[str, Any]) -> list[str]:
    """6. one ReadWriteOnce claim for pods in different zones; volume-claim GC."""
    out = []
    for claim in m["spec"].get("volumeClaimTemplates") or []:
        if "ReadWriteOnce" in claim["spec"].get("accessModes", []):
            out.append(f"claim {claim['metadata']['name']}: ReadWriteOnce shared by every step")
    return out


def pss_restricted_problems(m: dict[str, Any]) -> list[str]:
    """7. Pod Security Standards "restricted" (pod or container level), and requests."""
    pod = m["spec"].get("securityContext") or {}
    out = []
    for name, t in _pods(m).items():
        c = t["container"]
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append(f"{name}: allowPrivilegeEscalation is not false")
        if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
            out.append(f"{name}: capabilities do not drop ALL")
        if not (sc.get("runAsNonRoot") or pod.get("runAsNonRoot")):
            out.append(f"{name}: runAsNonRoot is not set")
        seccomp = (sc.get("seccompProfile") or pod.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            out.append(f"{name}: no seccompProfile RuntimeDefault")
        if sc.get("privileged"):
            out.append(f"{name}: privileged")
        if not (c.get("resources") or {}).get("requests"):
            out.append(f"{name}: no resource requests")
    return out


def give_up_problems(m: dict[str, Any]) -> list[str]:
    """9. run give-up's real command as Argo would call it after a train that ended in Error
    with exit code 0, and after one that left none (node lost): the run must fail, so
    give-up must run and exit non-zero (or the requeue must run instead)."""
    place = _templates(m)["place"]
    calls = {s["name"]: s for g in place["steps"] for s in g}
    out = []
    for scope in (
        {"steps.train.status": "Error", "steps.train.exitCode": "0"},
        {"steps.train.status": "Failed", "steps.train.exitCode": "0"},
    ):
        scope = {
            **scope,
            "inputs.parameters.candidate-index": "2",  # (the template before issue 25)
            "workflow.parameters.max-placements": "3",
            # since issue 25: provision's recovery record says no requeue, no restart left
            "steps.provision.outputs.parameters.infra": json.dumps(
                {"recovery": {"may_requeue": False, "may_restart": False}}
            ),
        }
        give_up = calls["give-up"]
        when = substitute(give_up["when"], scope)
        if not expr.evaluate_text(when, {}):
            out.append(f"give-up does not run after {scope['steps.train.status']}")
            continue
        args = {
            p["name"]: substitute(p["value"], scope) for p in give_up["arguments"]["parameters"]
        }
        c = _templates(m)[give_up["template"]]["container"]
        inputs = {f"inputs.parameters.{k}": v for k, v in args.items()}
        argv = [substitute(a, inputs) for a in [*c["command"], *c.get("args", [])]]
        assert argv[0] == "python"
        proc = subprocess.run([sys.executable, *argv[1:]], capture_output=True, check=False)
        if proc.returncode == 0:
            out.append(f"give-up exits 0 after train ended {scope['steps.train.status']}")
    return out


IAM = Path(__file__).resolve().parents[2] / "terraform" / "modules" / "aws-run-iam" / "main.tf"


def irsa_problems(m: dict[str, Any]) -> list[str]:
    """8. the run's IAM role trusts system:serviceaccount:<ns>:<the module's service account>;
    the train pod must run as exactly that account, and the workflow must create it annotated
    with the role provision made."""
    mt = re.search(r'coalesce\(var\.service_account,\s*"([^"]+)"\)', IAM.read_text())
    assert mt, "aws-run-iam no longer names its service account as expected"
    trusted = mt.group(1).replace("${var.run_id}", "{{workflow.name}}")
    out = []
    train = _templates(m)["train"]
    sa = train.get("serviceAccountName", m["spec"].get("serviceAccountName"))
    if sa != trusted:
        out.append(f"train runs as {sa}; the run's role trusts {trusted}")
    makers = [
        t
        for t in _templates(m).values()
        if "resource" in t and "\nkind: ServiceAccount\n" in t["resource"]["manifest"]
    ]
    made = [yaml.safe_load(t["resource"]["manifest"]) for t in makers]
    if not any(d["metadata"]["name"] == trusted for d in made):
        out.append(f"nothing creates the service account {trusted}")
    for d in made:
        if "eks.amazonaws.com/role-arn" not in (d["metadata"].get("annotations") or {}):
            out.append(f"{d['metadata']['name']}: not annotated with the run's role")
    return out


CHECKS: dict[str, Callable[[dict[str, Any]], list[str]]] = {
    "1-backoff-max-duration": backoff_problems,
    "2-missing-exit-code": missing_variable_problems,
    "3-artifact-repository": artifact_repository_problems,
    "4-gpu-request": gpu_problems,
    "5-stable-scheduling": scheduling_problems,
    "6-shared-rwo-claim": volume_problems,
    "7-pss-restricted": pss_restricted_problems,
    "8-irsa-service-account": irsa_problems,
    "9-give-up-exit-0": give_up_problems,
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_defect_found_in_the_old_manifest_and_fixed_in_the_golden(check: str) -> None:
    old = _load(OLD)
    new = _load(COMPILED / "burst-train.yaml")
    assert CHECKS[check](old), f"{check}: the check does not see the old defect"
    assert CHECKS[check](new) == []


def test_reaper_meets_the_same_rules() -> None:
    spec = _load(COMPILED / "burst-reaper.yaml")  # the WorkflowTemplate its CronWorkflow calls
    assert pss_restricted_problems(spec) == []
    assert not any("reap" in p for p in scheduling_problems({**spec, "spec": {
        **spec["spec"], "onExit": "h", "templates": [*spec["spec"]["templates"],
        {"name": "h", "steps": []}]}}))  # fmt: skip


def test_the_gang_pod_is_the_single_node_train_pod() -> None:
    """One train pod: the gang's pods get what single-node train gets (environment, GPUs,
    security, grace) from burst/pipelines/train_pod.py."""
    from burst.pipelines import gang, train_pod

    pod = gang.volcano_job()["spec"]["tasks"][0]["template"]["spec"]
    c = pod["containers"][0]
    names = {e["name"] for e in c["env"]}
    assert {e["name"] for e in train_pod.train_env()} <= names
    assert c["resources"] == train_pod.train_resources()
    assert pod["terminationGracePeriodSeconds"] == train_pod.TRAIN_GRACE_S
    assert pod["serviceAccountName"] == "burst-{{workflow.name}}"  # the run's own, as train
    new = _load(COMPILED / "burst-train.yaml")
    single = _templates(new)["train"]
    # the GPUs come from the podSpecPatch (a parameter is no Quantity), the floor from resources
    assert single["container"]["resources"] == train_pod.train_resources(gpus=False)
    assert train_pod.gpu_patch() in single["podSpecPatch"]
    assert single["container"]["securityContext"] == c["securityContext"]
    env = {e["name"]: e["value"] for e in single["container"]["env"]}
    for e in train_pod.train_env():
        assert env[e["name"]] == e["value"]


def test_resource_quantities_are_literal_in_every_compiled_template() -> None:
    """Argo's full CRDs (its install.yaml) check each container's resources against the
    Quantity pattern: `{{workflow.parameters.gpus-per-node}}` there made the API server refuse
    burst-train and burst-regional at `kubectl apply -k deploy/` (the engines tier found it).
    A parameter belongs in the podSpecPatch, which Argo substitutes before the pod exists."""
    quantity = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)(([KMGTPE]i)|[numkMGTPE]|[eE][+-]?\d+)?$")
    bad = []
    for path in sorted(COMPILED.glob("*.yaml")):
        doc = _load(path)
        spec = doc["spec"].get("workflowSpec", doc["spec"])
        for t in spec.get("templates") or []:
            for kind in ("container", "script"):
                res = (t.get(kind) or {}).get("resources") or {}
                for part in ("requests", "limits"):
                    for name, value in (res.get(part) or {}).items():
                        if not quantity.match(str(value)):
                            bad.append(f"{path.name}: {t['name']}: {part}.{name} = {value!r}")
    assert not bad, bad
