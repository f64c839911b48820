"""The pods Argo Workflows creates for a compiled template, built as its controller builds them.

Followed from argo-workflows (workflow/controller/workflowpod.go, workflowpod_layout.go,
v3.6 to v4.1, the legacy pod layout that is the default):

- ``createWorkflowPod``: a container (or script) template's pod has an ``init`` container
  (``newInitContainers`` -> ``standardInitContainer``: always, it stages the template and input
  artifacts), a ``wait`` container (``newWaitContainer``) and ``main`` (the template's own); a
  resource template's pod has ``init``, ``main`` (``argoexec resource``, built by
  ``newExecContainer``) and ``wait`` only when logs are archived (``needsAuxCtr``:
  ``tmpl.SaveLogsAsArtifact()``, which the default artifact repository's ``archiveLogs`` turns
  on).
- ``newExecContainer``: every injected container's ``securityContext`` and ``resources`` are
  the controller configuration's ``executor`` ones, nothing else; only a resource template's
  containers get ``common.MinimalCtrSC()`` when that is empty.
- ``addSchedulingConstraints`` / the pod security context: the template's ``securityContext``,
  ``nodeSelector``, ``tolerations``, ``affinity`` over the workflow's.
- ``setupServiceAccount``: the template's ``serviceAccountName`` over the workflow's; an
  ``executor.serviceAccountName`` mounts the Secret ``TokenNameForServiceAccount`` names
  (util/secrets/secret_name.go: the account's ``secrets[0]``, else ``<name>.service-account-token``).
- ``podSpecPatch`` is applied last (strategic merge: maps merge, containers by name).

The gang's Volcano Job pods (burst/pipelines/gang.py) are pods the workflow creates too: Volcano
copies each task's template into its pods (volcano pkg/controllers/job/job_controller_util.go,
``createJobPod``), adding environment and volumes, no containers.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CONTROLLER_CONFIG = REPO / "deploy" / "controller" / "workflow-controller-configmap.yaml"
ARTIFACT_REPOSITORY = REPO / "deploy" / "artifact-repository.yaml"

#: workflow/common/security_context.go MinimalCtrSC (resource templates, no executor config)
MINIMAL_CTR_SC: dict[str, Any] = {
    "capabilities": {"drop": ["ALL"]},
    "privileged": False,
    "runAsNonRoot": True,
    "runAsUser": 8737,
    "readOnlyRootFilesystem": True,
    "allowPrivilegeEscalation": False,
    "seccompProfile": {"type": "RuntimeDefault"},
}

#: What the tests substitute for the run's values (provision's outputs come from the stack).
SAMPLE = {
    "{{inputs.parameters.node-selector}}": {"burst.dev/run-id": "wf"},
    "{{inputs.parameters.tolerations}}": [
        {"key": "burst.dev/run-id", "operator": "Equal", "value": "wf", "effect": "NoSchedule"}
    ],
}


@dataclass
class Pod:
    """One pod a template creates: where it comes from and its spec."""

    workflow: str
    template: str
    spec: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.workflow}/{self.template}"

    def containers(self) -> list[dict[str, Any]]:
        return [*(self.spec.get("initContainers") or []), *(self.spec.get("containers") or [])]

    @property
    def service_account(self) -> str:
        return str(self.spec.get("serviceAccountName") or "default")


def executor_config(path: Path = CONTROLLER_CONFIG) -> dict[str, Any]:
    """The controller ConfigMap's ``executor`` key (a YAML document in a string), or {} when
    deploy/ ships none (Argo's default: an empty container)."""
    if not path.exists():
        return {}
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    return yaml.safe_load((doc.get("data") or {}).get("executor") or "{}") or {}


def archive_logs(path: Path = ARTIFACT_REPOSITORY) -> bool:
    """Whether the namespace's default artifact repository archives logs (then every pod,
    resource templates' too, has a wait container that uploads main's log)."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    default = doc["metadata"]["annotations"]["workflows.argoproj.io/default-artifact-repository"]
    repo = yaml.safe_load(doc["data"][default])
    return bool(repo.get("archiveLogs"))


def _exec_container(name: str, kind: str, executor: dict[str, Any]) -> dict[str, Any]:
    sc = copy.deepcopy(executor.get("securityContext"))
    if kind == "resource" and sc is None:
        sc = dict(MINIMAL_CTR_SC)
    c: dict[str, Any] = {"name": name, "image": "quay.io/argoproj/argoexec:v4.1.2"}
    if sc is not None:
        c["securityContext"] = sc
    if executor.get("resources"):
        c["resources"] = copy.deepcopy(executor["resources"])
    return c


def _merge(base: dict[str, Any], patch: dict[str, Any]) -> None:
    """Strategic merge, as far as the patches here go: maps merge key by key, containers
    merge by name (their patch key), other lists and values replace."""
    for key, value in patch.items():
        if key in ("containers", "initContainers") and isinstance(value, list):
            by_name = {c["name"]: c for c in base.get(key) or []}
            for c in value:
                if c["name"] in by_name:
                    _merge(by_name[c["name"]], c)
                else:
                    base.setdefault(key, []).append(c)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value


def _patch(spec: dict[str, Any], patch: str) -> None:
    text = patch
    for key, value in SAMPLE.items():
        text = text.replace(key, json.dumps(value))
    _merge(spec, json.loads(text))


def _kind(t: dict[str, Any]) -> str | None:
    for kind in ("container", "script", "resource"):
        if kind in t:
            return kind
    return None


def workflow_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest["spec"]
    return spec["workflowSpec"] if manifest["kind"] == "CronWorkflow" else spec  # type: ignore[no-any-return]


def pods(
    manifest: dict[str, Any],
    executor: dict[str, Any] | None = None,
    logs_archived: bool | None = None,
) -> list[Pod]:
    """Every pod the template's templates create, with Argo's injected containers."""
    executor = executor_config() if executor is None else executor
    logs_archived = archive_logs() if logs_archived is None else logs_archived
    wf = workflow_spec(manifest)
    name = manifest["metadata"]["name"]
    out = []
    for t in wf["templates"]:
        kind = _kind(t)
        if kind is None:
            continue
        spec: dict[str, Any] = {
            "serviceAccountName": t.get("serviceAccountName") or wf.get("serviceAccountName"),
            "securityContext": copy.deepcopy(t.get("securityContext") or wf.get("securityContext")),
            "volumes": [
                *copy.deepcopy(wf.get("volumes") or []),
                {"name": "var-run-argo", "emptyDir": {}},
            ],
        }
        for key in ("nodeSelector", "tolerations", "affinity"):
            if t.get(key) or wf.get(key):
                spec[key] = copy.deepcopy(t.get(key) or wf.get(key))
        executor_sa = (t.get("executor") or {}).get("serviceAccountName") or (
            wf.get("executor") or {}
        ).get("serviceAccountName")
        if executor_sa:
            spec["volumes"].append(
                {
                    "name": "exec-sa-token",
                    "secret": {"secretName": f"{executor_sa}.service-account-token"},
                }
            )
        init = _exec_container("init", kind, executor)
        if kind == "resource":
            main = _exec_container("main", kind, executor)
            containers = [main]
            if logs_archived:
                containers.insert(0, _exec_container("wait", kind, executor))
        else:
            main = copy.deepcopy(t[kind])
            main["name"] = "main"
            containers = [_exec_container("wait", kind, executor), main]
        spec["initContainers"] = [init]
        spec["containers"] = containers
        if t.get("podSpecPatch"):
            _patch(spec, t["podSpecPatch"])
        out.append(Pod(name, t["name"], spec, {"executor-sa": executor_sa or ""}))
        if kind == "resource":
            out += _created_pods(name, t)
    return out


def _created_pods(workflow: str, t: dict[str, Any]) -> list[Pod]:
    """Pods of a resource the template creates (the gang's Volcano Job)."""
    text = t["resource"]["manifest"]
    if "kind: Job" not in text or "batch.volcano.sh" not in text:
        return []
    for key, value in SAMPLE.items():
        text = text.replace(key, json.dumps(value))
    # other tags lose their braces (YAML reads them as plain text, the names kept)
    job = yaml.safe_load(
        re.sub(r"\{\{(?!workflow\.name\}\})([^}]*)\}\}", lambda m: m.group(1), text)
    )
    return [
        Pod(workflow, f"{t['name']}/{task['name']}", task["template"]["spec"])
        for task in job["spec"]["tasks"]
    ]
