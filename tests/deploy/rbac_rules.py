"""What each identity needs of the Kubernetes API against what deploy/ grants it (RBAC).

Grants: Kubernetes RBAC evaluation (https://kubernetes.io/docs/reference/access-authn-authz/rbac/;
plugin/pkg/auth/authorizer/rbac/rbac.go ``RuleAllows``): a request is allowed when a rule of a
Role bound to the subject lists its API group, resource and verb (``*`` matches any); a
RoleBinding's ServiceAccount subject is ``system:serviceaccount:<ns>:<name>``; a Group subject
matches the groups the authenticator gives (an EKS access entry's ``kubernetesGroups``).

Needs, from the engines' sources:
- Argo's executor (the ``wait`` container, and ``main`` of a resource template) reports a step's
  outputs as a WorkflowTaskResult: ``create`` and ``patch`` on ``workflowtaskresults`` (Argo
  docs/workflow-rbac.md, "The minimum for the executor to function", >= v3.4).
- A resource template's ``main`` runs ``kubectl <action>`` on its manifest
  (workflow/executor/resource.go ``ExecResource``): ``apply`` reads the object then creates or
  patches it (``get``, ``create``, ``patch``), ``create`` creates it; a success or failure
  condition polls the object (``WaitResource`` -> ``checkResourceState``: ``get``).
- The submitter (``burst submit``, ``status``, ``finish`` through the Argo server, whose client
  auth mode acts with the caller's token: server/workflow/workflow_server.go): ``create``
  (CreateWorkflow), ``get`` (GetWorkflow), ``patch`` (StopWorkflow -> util.StopWorkflow ->
  patchShutdownStrategy) on ``workflows``; ``get`` on ``workflowtemplates`` (the
  workflowTemplateRef is resolved for validation with the caller's client).
- The reaper lists unfinished workflows (burst.runner.argo.unfinished_workflows:
  ListWorkflows): ``list`` on ``workflows``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from argo_pods import Pod, workflow_spec

Need = tuple[str, str, str]  # (apiGroup, resource, verb)
EXECUTOR_NEEDS: frozenset[Need] = frozenset(
    {
        ("argoproj.io", "workflowtaskresults", "create"),
        ("argoproj.io", "workflowtaskresults", "patch"),
    }
)
SUBMITTER_NEEDS: frozenset[Need] = frozenset(
    {
        ("argoproj.io", "workflows", "create"),
        ("argoproj.io", "workflows", "get"),
        ("argoproj.io", "workflows", "patch"),
        ("argoproj.io", "workflowtemplates", "get"),
    }
)
REAPER_NEEDS: frozenset[Need] = frozenset({("argoproj.io", "workflows", "list")})
#: kind -> (apiGroup, resource) of the objects the templates' resource steps handle
KINDS = {
    "ServiceAccount": ("", "serviceaccounts"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "Job": ("batch.volcano.sh", "jobs"),
}
ACTION_VERBS = {"apply": ("get", "create", "patch"), "create": ("create",), "delete": ("delete",)}


@dataclass(frozen=True)
class Subject:
    kind: str  # ServiceAccount, Group, User
    name: str


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def grants(rbac_docs: list[dict[str, Any]]) -> dict[Subject, set[Need]]:
    """What each subject of the RoleBindings may do (rules expanded to triples; ``*`` kept)."""
    roles = {d["metadata"]["name"]: d for d in rbac_docs if d["kind"] == "Role"}
    out: dict[Subject, set[Need]] = defaultdict(set)
    for b in (d for d in rbac_docs if d["kind"] == "RoleBinding"):
        role = roles.get(b["roleRef"]["name"])
        if role is None:
            continue
        triples = {
            (g, r, v)
            for rule in role.get("rules") or []
            for g in rule.get("apiGroups") or [""]
            for r in rule.get("resources") or []
            for v in rule.get("verbs") or []
        }
        for s in b.get("subjects") or []:
            out[Subject(s["kind"], s["name"])] |= triples
    return out


def allows(granted: set[Need], need: Need) -> bool:
    g, r, v = need
    return any(gg in (g, "*") and rr in (r, "*") and vv in (v, "*") for gg, rr, vv in granted)


def template_bindings(manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """RoleBindings (and their Roles' names) the workflow itself applies for its run."""
    out = []
    for t in workflow_spec(manifest)["templates"]:
        text = (t.get("resource") or {}).get("manifest") or ""
        if "kind: RoleBinding" in text:
            out.append(yaml.safe_load(text))
    return out


def pod_needs(pods: list[Pod], manifest: dict[str, Any]) -> dict[Subject, set[Need]]:
    """What the identities of the template's pods need (executor and resource steps)."""
    templates = {t["name"]: t for t in workflow_spec(manifest)["templates"]}
    out: dict[Subject, set[Need]] = defaultdict(set)
    for p in pods:
        t = templates.get(p.template)
        names = {c["name"] for c in p.spec.get("containers") or []}
        identity = Subject("ServiceAccount", p.labels.get("executor-sa") or p.service_account)
        if t is None:  # a pod of a created resource (the gang's): no executor in it
            continue
        if "wait" in names:
            out[identity] |= EXECUTOR_NEEDS
        resource = t.get("resource")
        if resource:
            obj = yaml.safe_load(
                "\n".join(
                    line
                    for line in resource["manifest"].splitlines()
                    if line.startswith(("kind:", "apiVersion:"))
                )
            )
            group, plural = KINDS[obj["kind"]]
            verbs = set(ACTION_VERBS[resource["action"]])
            if resource.get("successCondition") or resource.get("failureCondition"):
                verbs.add("get")
            out[Subject("ServiceAccount", p.service_account)] |= {(group, plural, v) for v in verbs}
            # the executor main reports too
            out[Subject("ServiceAccount", p.service_account)] |= EXECUTOR_NEEDS
    return out
