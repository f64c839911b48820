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
  ListWorkflows): ``list`` on ``workflows``; and deletes a reaped run's Kueue Workload
  (burst.admission.steps.settle_reaped): ``delete`` on ``workloads``.
- The provision step (a container running ``python -m burst.steps.provision``) reads its
  team's Kueue queue before renting (burst/admission/kueue_reader.py): ``get`` on
  ``localqueues``, ``get`` on ``clusterqueues``, ``list`` on ``resourceflavors``; and holds
  its quota through the run's Workload (burst/admission/kueue_workload.py): ``create``,
  ``get``, ``delete`` on ``workloads``, ``get`` on the LocalQueue's ``pendingworkloads``
  (Kueue's visibility API, its position). Teardown deletes the Workload; the train pod reads
  it for an eviction (burst/admission/kueue_watch.py): ``get``.
"""

from __future__ import annotations

import copy
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
REAPER_NEEDS: frozenset[Need] = frozenset(
    {
        ("argoproj.io", "workflows", "list"),
        # a reaped run's Workload (burst.admission.steps.settle_reaped -> release_quota)
        ("kueue.x-k8s.io", "workloads", "delete"),
    }
)
PROVISION_NEEDS: frozenset[Need] = frozenset(
    {
        ("kueue.x-k8s.io", "localqueues", "get"),
        ("kueue.x-k8s.io", "clusterqueues", "get"),
        ("kueue.x-k8s.io", "resourceflavors", "list"),
        # the run's Workload (burst/admission/kueue_workload.py): made, waited on, and made
        # again (delete) when an earlier placement's was evicted or the wait timed out
        ("kueue.x-k8s.io", "workloads", "create"),
        ("kueue.x-k8s.io", "workloads", "get"),
        ("kueue.x-k8s.io", "workloads", "delete"),
        ("visibility.kueue.x-k8s.io", "localqueues/pendingworkloads", "get"),
    }
)
PROVISION_MODULE = "burst.steps.provision"
#: teardown deletes the run's Workload; train reads it for an eviction (kueue_watch.py)
STEP_NEEDS: dict[str, frozenset[Need]] = {
    "burst.steps.teardown": frozenset({("kueue.x-k8s.io", "workloads", "delete")}),
    "burst.steps.train": frozenset({("kueue.x-k8s.io", "workloads", "get")}),
}
#: kind -> (apiGroup, resource) of the objects the templates' resource steps handle
KINDS = {
    "ServiceAccount": ("", "serviceaccounts"),
    "RoleBinding": ("rbac.authorization.k8s.io", "rolebindings"),
    "Job": ("batch.volcano.sh", "jobs"),
    "NetworkPolicy": ("networking.k8s.io", "networkpolicies"),
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
    roles = {
        (d["kind"], d["metadata"]["name"]): d
        for d in rbac_docs
        if d["kind"] in ("Role", "ClusterRole")
    }
    out: dict[Subject, set[Need]] = defaultdict(set)
    for b in (d for d in rbac_docs if d["kind"] in ("RoleBinding", "ClusterRoleBinding")):
        role = roles.get((b["roleRef"].get("kind", "Role"), b["roleRef"]["name"]))
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
        if any(PROVISION_MODULE in (c.get("command") or []) for c in p.containers()):
            out[Subject("ServiceAccount", p.service_account)] |= PROVISION_NEEDS
        for module, needs in STEP_NEEDS.items():
            if any(module in " ".join(c.get("command") or []) for c in p.containers()):
                out[Subject("ServiceAccount", p.service_account)] |= needs
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


# -- who may run as whom: each identity x action, allowed or refused ----------------------------
#
# The cases a real kube-apiserver decides (RBAC, then the ValidatingAdmissionPolicies of
# deploy/admission): `kubectl auth can-i` for the verbs, a create or a merge patch for what only
# admission can judge. Identities are what the API server's authenticator hands over: a user and
# groups, and for a pod's service-account token the pod it is bound to
# (userInfo.extra authentication.kubernetes.io/pod-name), which `kubectl --as-user-extra`
# impersonates and a TokenRequest bound to the pod (`kubectl create token --bound-object-kind
# Pod`) carries for real. The fixtures (FIXTURES) are applied first by a cluster administrator,
# after deploy/'s namespace, accounts, RBAC and admission policies and Argo's and Volcano's CRDs.

NAMESPACE = "burst"
#: the caller's run and another team's, as the API server names them (generateName + 5 chars)
RUN = "job-bcdfg"
OTHER = "other-hjklm"
SA_GROUPS = (
    "system:serviceaccounts",
    f"system:serviceaccounts:{NAMESPACE}",
    "system:authenticated",
)
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"


@dataclass(frozen=True)
class Identity:
    handle: str  # the name the table uses
    user: str
    groups: tuple[str, ...] = ("system:authenticated",)
    pod: str = ""  # the pod the token is bound to ("" for a person or an unbound token)

    def kubectl_args(self) -> list[str]:
        """Impersonation flags (the caller must be allowed to impersonate: an administrator)."""
        args = [f"--as={self.user}", *(f"--as-group={g}" for g in self.groups)]
        if self.pod:
            args.append(f"--as-user-extra={POD_NAME_EXTRA}={self.pod}")
        return args


def _account(name: str, pod: str, handle: str, ns: str = NAMESPACE) -> Identity:
    groups = ("system:serviceaccounts", f"system:serviceaccounts:{ns}", "system:authenticated")
    return Identity(handle, f"system:serviceaccount:{ns}:{name}", groups, pod)


ADMIN = Identity("cluster admin", "admin", ("system:masters", "system:authenticated"))
BURST_ADMIN = Identity("burst admin", "ops", ("burst:admins", "system:authenticated"))
SUBMITTER = Identity("submitter (CI)", "ci", ("burst:submitters", "system:authenticated"))
STRANGER = Identity("authenticated user", "someone")
ARGO_CONTROLLER = _account("argo", "", "Argo controller", ns="argo")
ARGO_SERVER = _account("argo-server", "", "argo-server (own token)", ns="argo")
GARBAGE_COLLECTOR = _account("generic-garbage-collector", "", "GC", ns="kube-system")
VOLCANO = _account("volcano-controllers", "", "Volcano controller", ns="volcano-system")
REAPER = _account("burst-reaper", "burst-reaper-1700000000-reap-11", "burst-reaper pod")


def run_step(template: str, run: str = RUN) -> Identity:
    """A step pod of ``run`` running as burst-run: Argo names it <run>-<template>-<hash>."""
    return _account("burst-run", f"{run}-{template}-1234567", f"burst-run ({template} of run)")


TRAIN = _account(f"burst-{RUN}", f"{RUN}-train-2233445566", "burst-<run> (train pod)")
UNBOUND_TRAIN = _account(f"burst-{RUN}", "", "burst-<run>, token bound to no pod")
#: the train pod's node id: the workflow's name and the hash its pod's name ends with
TRAIN_NODE = f"{RUN}-2233445566"
OTHER_NODE = f"{OTHER}-5566778899"
GANG = f"{RUN}-train-wxyz2"


def _owner(run: str) -> dict[str, Any]:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "name": run,
        "uid": f"{{uid:{run}}}",  # the runner puts the Workflow's uid here
        "blockOwnerDeletion": True,
    }


def submitted_workflow(**spec: Any) -> dict[str, Any]:
    """What ``burst submit`` sends (burst.runner.argo.build_workflow), plus ``spec``."""
    body: dict[str, Any] = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "job-", "labels": {"burst.dev/job": "job"}},
        "spec": {
            "workflowTemplateRef": {"name": "burst-train"},
            "activeDeadlineSeconds": 7200,
            "arguments": {"parameters": [{"name": "spec", "value": "name: job\n"}]},
        },
    }
    body["spec"].update(spec)
    return body


#: deploy/argo: the WorkflowTemplates as deploy/ ships them (copies of burst/pipelines/compiled)
ARGO_TEMPLATES = Path(__file__).resolve().parents[2] / "deploy" / "argo"


def argo_stored_templates(template: str = "burst-train") -> dict[str, Any]:
    """``status.storedTemplates`` as Argo's submit paths write it at creation (v4.0.5
    server/workflow/workflow_server.go CreateWorkflow, the ``burst submit`` path, and
    SubmitWorkflow, which ``argo submit --from`` runs in-process: validate.ValidateWorkflow
    resolves every template of the WorkflowTemplate through workflow/templateresolution and
    keeps each under ``namespaced/<WorkflowTemplate>/<template>``), from deploy/argo's copy of
    it. Go's JSON encoding of Argo's types adds zero values of struct fields (a template's
    inputs and outputs ``{}``, a step's arguments ``{}``, a container's name ``""`` and
    resources ``{}``), and templateresolution merges the WorkflowTemplate's spec.podMetadata into
    each template's metadata (addPodMetadata: its keys win). Checked against what Argo's CLI
    and server wrote on kube-apiserver v1.35.4 (engines tier)."""
    (wt,) = [d for d in yaml.safe_load_all((ARGO_TEMPLATES / f"{template}.yaml").read_text()) if d]
    pod_metadata = wt["spec"].get("podMetadata") or {}
    out: dict[str, Any] = {}
    for t in copy.deepcopy(wt["spec"]["templates"]):
        t.setdefault("inputs", {})
        t.setdefault("outputs", {})
        metadata = t.get("metadata") or {}
        for m in ("labels", "annotations"):
            merged = {**(metadata.get(m) or {}), **(pod_metadata.get(m) or {})}
            if merged:
                metadata[m] = merged
        t["metadata"] = metadata
        if "container" in t:
            t["container"].setdefault("name", "")
            t["container"].setdefault("resources", {})
        for group in t.get("steps") or []:
            for step in group:
                step.setdefault("arguments", {})
        out[f"namespaced/{template}/{t['name']}"] = t
    return out


def argo_submitted_workflow(
    template: str = "burst-train", stored: dict[str, Any] | None = None
) -> dict[str, Any]:
    """What ``argo submit --from workflowtemplate/<template> --parameter-file P`` creates as
    the CI user (Argo's server creates the same status for ``burst submit``): the creator
    labels, the parameters, Go's null timestamps and the stored templates (``stored`` replaces
    or adds entries)."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {
            "generateName": f"{template}-",
            "creationTimestamp": None,
            "labels": {
                "workflows.argoproj.io/creator": "ci",
                "workflows.argoproj.io/workflow-template": template,
            },
        },
        "spec": {
            "workflowTemplateRef": {"name": template},
            "arguments": {"parameters": [{"name": "spec", "value": "name: job\n"},
                                         {"name": "tf-stack", "value": "local"}]},
        },
        "status": {
            "startedAt": None,
            "finishedAt": None,
            "storedTemplates": {**argo_stored_templates(template), **(stored or {})},
        },
    }  # fmt: skip


def _swapped_train() -> dict[str, Any]:
    """burst-train's train template as a submitter would store it: another image and command,
    and no serviceAccountName (the pod would run as the orchestration account, burst-run)."""
    t = argo_stored_templates()["namespaced/burst-train/train"]
    t.pop("serviceAccountName", None)
    t["container"] = {**t["container"], "image": "registry.local/x@sha256:" + "0" * 64,
                      "command": ["sh", "-c"], "args": ["cat /var/run/secrets/*/*/token"]}  # fmt: skip
    return t


def task_result(name: str, workflow: str) -> dict[str, Any]:
    """What Argo's executor creates (workflow/executor/taskresult.go createTaskResult)."""
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTaskResult",
        "metadata": {
            "name": name,
            "labels": {
                "workflows.argoproj.io/workflow": workflow,
                "workflows.argoproj.io/report-outputs-completed": "false",
            },
            "ownerReferences": [_owner(workflow)],
        },
    }


def run_account(name: str, run: str = RUN, **extra: Any) -> dict[str, Any]:
    """The run's ServiceAccount as the run-service-account step applies it."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": name,
            "labels": {"app.kubernetes.io/part-of": "burst", "burst.dev/run-id": run},
            "annotations": {"eks.amazonaws.com/role-arn": f"arn:aws:iam::111122223333:role/{run}"},
            "ownerReferences": [_owner(run)],
        },
        **extra,
    }


def run_binding(subject: str, role: str = "burst-executor", run: str = RUN) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {
            "name": f"{subject}-executor",
            "labels": {"burst.dev/run-id": run},
            "ownerReferences": [_owner(run)],
        },
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": subject, "namespace": NAMESPACE}],
    }


def gang(account: str, run: str = RUN) -> dict[str, Any]:
    pod = {
        "metadata": {"labels": {"burst.dev/run-id": run}},
        "spec": {
            "serviceAccountName": account,
            "restartPolicy": "Never",
            "containers": [{"name": "train", "image": "trainer"}],
        },
    }
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "generateName": f"{run}-train-",
            "labels": {"burst.dev/run-id": run},
            "ownerReferences": [_owner(run)],
        },
        "spec": {"minAvailable": 2, "tasks": [{"name": "master", "replicas": 1, "template": pod}]},
    }


def pod(account: str, labels: dict[str, str]) -> dict[str, Any]:
    """A pod that meets Pod Security `restricted`: only its account and labels vary."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"generateName": "p-", "labels": labels},
        "spec": {
            "serviceAccountName": account,
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "runAsUser": 1000,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": "registry.local/x@sha256:" + "0" * 64,
                "securityContext": {"allowPrivilegeEscalation": False,
                                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }  # fmt: skip


def argo_pod(account: str, run: str = RUN) -> dict[str, Any]:
    return pod(account, {"workflows.argoproj.io/workflow": run, "burst.dev/run-id": run})


#: What a cluster administrator applies before the cases: both runs' Workflows (named, so their
#: uids exist), their accounts, a finished step's task result of the other run, the run's gang,
#: another team's account, and the rights Argo's install gives its controller and server
#: (cluster-install-no-crds: pods create, workflows create/update/patch) and Volcano its own.
FIXTURES: tuple[dict[str, Any], ...] = (
    *(
        {
            "apiVersion": "argoproj.io/v1alpha1",
            "kind": "Workflow",
            "metadata": {"name": run},
            "spec": {"workflowTemplateRef": {"name": "burst-train"}},
        }
        for run in (RUN, OTHER)
    ),
    run_account(f"burst-{RUN}"),
    run_account(f"burst-{OTHER}", run=OTHER),
    run_binding(f"burst-{RUN}"),
    task_result(OTHER_NODE, OTHER),
    {**gang(f"burst-{RUN}"), "metadata": {**gang(f"burst-{RUN}")["metadata"], "name": GANG}},
    {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "team-b-deployer"}},
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "tier-controllers"},
        "rules": [
            {"apiGroups": [""], "resources": ["pods"], "verbs": ["create"]},
            {"apiGroups": ["argoproj.io"], "resources": ["workflows"],
             "verbs": ["get", "update", "patch", "create"]},
            {"apiGroups": ["batch.volcano.sh"], "resources": ["jobs"], "verbs": ["get", "update", "patch"]},
        ],
    },
    {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "tier-controllers"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tier-controllers"},
        "subjects": [
            {"kind": "ServiceAccount", "name": "argo", "namespace": "argo"},
            {"kind": "ServiceAccount", "name": "argo-server", "namespace": "argo"},
            {"kind": "ServiceAccount", "name": "volcano-controllers", "namespace": "volcano-system"},
        ],
    },
)  # fmt: skip


@dataclass(frozen=True)
class CanI:
    """``kubectl auth can-i VERB RESOURCE -n burst`` as ``who``: RBAC alone."""

    who: Identity
    verb: str
    resource: str  # as kubectl names it: workflows.argoproj.io, serviceaccounts, ...
    allowed: bool
    subresource: str = ""  # `--subresource` (a/b would read as resource a, name b)


@dataclass(frozen=True)
class Admit:
    """A create (``body``) or a merge patch (``patch`` of ``resource``/``name``) as ``who``;
    ``allowed`` is the outcome, ``policy`` the ValidatingAdmissionPolicy that refuses it
    ("" when RBAC refuses, or when it is allowed). The patch is one PATCH request, as Argo's
    executor and server send it: `kubectl patch` GETs the object first, which burst-executor
    may not. The cases run in order (a patch may need an earlier create)."""

    who: Identity
    what: str  # the table's words
    allowed: bool
    policy: str = ""
    body: dict[str, Any] | None = None
    resource: str = ""
    name: str = ""
    patch: dict[str, Any] | None = None


WF, TR, PI = "burst-workflows", "burst-task-results", "burst-pod-identities"
RA, RB, RG = "burst-run-accounts", "burst-run-bindings", "burst-run-gangs"
ST = "burst-stored-templates"
STOP = {
    "spec": {"shutdown": "Stop"},
    "metadata": {"labels": {"workflows.argoproj.io/action": "Stop"}},
}

CAN_I: tuple[CanI, ...] = (
    *(CanI(SUBMITTER, v, "workflows.argoproj.io", True) for v in ("create", "get", "patch")),
    CanI(SUBMITTER, "get", "workflowtemplates.argoproj.io", True),
    *(
        CanI(SUBMITTER, v, r, False)
        for v, r in (
            ("delete", "workflows.argoproj.io"), ("update", "workflows.argoproj.io"),
            ("list", "workflows.argoproj.io"), ("create", "workflowtemplates.argoproj.io"),
            ("create", "cronworkflows.argoproj.io"), ("create", "workflowtaskresults.argoproj.io"),
            ("create", "pods"), ("create", "serviceaccounts"), ("create", "rolebindings"),
            ("get", "secrets"),
        )
    ),
    CanI(SUBMITTER, "create", "serviceaccounts", False, "token"),
    CanI(REAPER, "list", "workflows.argoproj.io", True),
    *(CanI(REAPER, v, r, False) for v, r in (
        ("get", "workflows.argoproj.io"), ("patch", "workflows.argoproj.io"),
        ("create", "pods"), ("get", "secrets"),
    )),
    *(CanI(run_step("provision"), v, r, True) for v, r in (
        ("create", "serviceaccounts"), ("patch", "serviceaccounts"), ("get", "serviceaccounts"),
        ("create", "rolebindings"), ("patch", "rolebindings"), ("get", "rolebindings"),
        ("create", "jobs.batch.volcano.sh"), ("get", "jobs.batch.volcano.sh"),
        ("create", "workflowtaskresults.argoproj.io"), ("patch", "workflowtaskresults.argoproj.io"),
    )),
    *(CanI(run_step("provision"), v, r, False) for v, r in (
        ("create", "pods"), ("create", "workflows.argoproj.io"), ("get", "secrets"),
        ("delete", "serviceaccounts"), ("delete", "rolebindings"), ("create", "roles"),
        ("list", "jobs.batch.volcano.sh"),
    )),
    CanI(run_step("provision"), "create", "serviceaccounts", False, "token"),
    *(CanI(TRAIN, v, "workflowtaskresults.argoproj.io", True) for v in ("create", "patch")),
    *(CanI(TRAIN, v, r, False) for v, r in (
        ("get", "workflowtaskresults.argoproj.io"), ("delete", "workflowtaskresults.argoproj.io"),
        ("create", "pods"), ("get", "secrets"), ("create", "serviceaccounts"),
        ("create", "rolebindings"), ("get", "workflows.argoproj.io"),
    )),
    *(CanI(STRANGER, v, "workflows.argoproj.io", False) for v in ("create", "get")),
)  # fmt: skip

ADMIT: tuple[Admit, ...] = (
    # -- Workflows: a submitter runs a shipped template, and chooses no identity or shape -----
    Admit(SUBMITTER, "submit burst-train as `burst submit` does", True, body=submitted_workflow()),
    Admit(SUBMITTER, "submit burst-regional", True,
          body=submitted_workflow(workflowTemplateRef={"name": "burst-regional"})),
    Admit(
        SUBMITTER,
        "submit as Argo's server re-encodes it (Go zero values: status nulls, labels)",
        True,
        body={
            **submitted_workflow(),
            "metadata": {
                "generateName": "job-",
                "creationTimestamp": None,
                "labels": {"burst.dev/job": "job", "workflows.argoproj.io/creator": "ci"},
            },
            "status": {"startedAt": None, "finishedAt": None},
        },
    ),
    Admit(SUBMITTER, "submit with metadata.name (chosen run id)", False, WF,
          body={**submitted_workflow(), "metadata": {"name": f"{OTHER}x"}}),
    *(
        Admit(SUBMITTER, f"submit with spec.{k}", False, WF, body=submitted_workflow(**{k: v}))
        for k, v in (
            ("serviceAccountName", "burst-run"),
            ("executor", {"serviceAccountName": "burst-run"}),
            ("automountServiceAccountToken", False),
            ("podSpecPatch", '{"serviceAccountName": "burst-run"}'),
            ("templates", [{"name": "x", "container": {"image": "x"}, "serviceAccountName": "burst-run"}]),
            ("entrypoint", "provision"),
            ("artifactGC", {"serviceAccountName": "burst-run", "strategy": "OnWorkflowDeletion"}),
            ("archiveLogs", True),
            ("podMetadata", {"labels": {"workflows.argoproj.io/workflow": OTHER}}),
            ("securityContext", {"runAsUser": 0}),
            ("volumes", [{"name": "h", "hostPath": {"path": "/"}}]),
            ("hostNetwork", True),
            ("templateDefaults", {"serviceAccountName": "burst-run"}),
            ("onExit", "provision"),
            ("shutdown", "Terminate"),
        )
    ),
    Admit(SUBMITTER, "submit with inline templates and no workflowTemplateRef", False, WF,
          body={**submitted_workflow(), "spec": {"entrypoint": "x", "serviceAccountName": "burst-run",
                "templates": [{"name": "x", "container": {"image": "x"}}]}}),
    Admit(SUBMITTER, "submit a ClusterWorkflowTemplate", False, WF,
          body=submitted_workflow(workflowTemplateRef={"name": "burst-train", "clusterScope": True})),
    Admit(SUBMITTER, "submit another WorkflowTemplate", False, WF,
          body=submitted_workflow(workflowTemplateRef={"name": "team-b-pipeline"})),
    Admit(SUBMITTER, "submit a parameter with valueFrom", False, WF,
          body=submitted_workflow(arguments={"parameters": [
              {"name": "team", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}}}]})),
    Admit(SUBMITTER, "submit with label workflows.argoproj.io/controller-instanceid", False, WF,
          body={**submitted_workflow(), "metadata": {"generateName": "job-", "labels": {
              "workflows.argoproj.io/controller-instanceid": "other"}}}),
    # Argo's Go field StoredWorkflowSpec is status.storedWorkflowTemplateSpec on the wire
    Admit(SUBMITTER, "submit with a status.storedWorkflowTemplateSpec", False, WF,
          body={**submitted_workflow(), "status": {"storedWorkflowTemplateSpec": {
              "serviceAccountName": "burst-run"}}}),
    # Argo's submit paths store the WorkflowTemplate's templates in the run's status, which the
    # controller runs in place of the WorkflowTemplate's: as Argo writes them, and only so
    *(
        Admit(SUBMITTER, f"submit {t} as `argo submit --from` (and Argo's server) create it: "
              "status.storedTemplates", True, body=argo_submitted_workflow(t))
        for t in ("burst-train", "burst-regional")
    ),
    Admit(SUBMITTER, "submit with a stored train template of another image and no account", False,
          ST, body=argo_submitted_workflow(stored={"namespaced/burst-train/train": _swapped_train()})),
    Admit(SUBMITTER, "submit with a stored template of another WorkflowTemplate", False, ST,
          body=argo_submitted_workflow(stored={
              "namespaced/burst-regional/train": argo_stored_templates()["namespaced/burst-train/train"]})),
    Admit(SUBMITTER, "submit with a stored template burst-train does not have", False, ST,
          body=argo_submitted_workflow(stored={"namespaced/burst-train/shell": _swapped_train()})),
    Admit(SUBMITTER, "submit with a status.phase beside the stored templates", False, WF,
          body={**argo_submitted_workflow(), "status": {
              **argo_submitted_workflow()["status"], "phase": "Succeeded"}}),
    Admit(SUBMITTER, "stop a run (spec.shutdown: Stop, Argo's actor label)", True,
          resource="workflows.argoproj.io", name=RUN, patch=STOP),
    *(
        Admit(SUBMITTER, what, False, WF, resource="workflows.argoproj.io", name=RUN, patch=p)
        for what, p in (
            ("terminate a run (skips teardown)", {"spec": {"shutdown": "Terminate"}}),
            ("patch spec.serviceAccountName", {"spec": {"serviceAccountName": "burst-run"}}),
            ("patch spec.workflowTemplateRef", {"spec": {"workflowTemplateRef": {"name": "x"}}}),
            ("patch status.storedWorkflowTemplateSpec",
             {"status": {"storedWorkflowTemplateSpec": {"serviceAccountName": "burst-run"}}}),
            ("label a run completed (hides it from the reaper)",
             {"metadata": {"labels": {"workflows.argoproj.io/completed": "true"}}}),
            ("suspend a run", {"spec": {"suspend": True}}),
        )
    ),
    Admit(ARGO_SERVER, "argo-server's own token submits with spec.serviceAccountName", False, WF,
          body=submitted_workflow(serviceAccountName="burst-run")),
    Admit(ADMIN, "cluster admin submits with spec.serviceAccountName", True,
          body=submitted_workflow(serviceAccountName="burst-run")),
    Admit(BURST_ADMIN, "burst admin (burst:admins) may not: no RBAC in deploy/", False,
          body=submitted_workflow(serviceAccountName="burst-run")),
    Admit(ARGO_CONTROLLER, "Argo controller writes a run's status", True,
          resource="workflows.argoproj.io", name=RUN,
          patch={"status": {"phase": "Running"},
                 "metadata": {"labels": {"workflows.argoproj.io/phase": "Running"}}}),
    # -- WorkflowTaskResults: a step pod reports its own node's outputs only ----------------------
    Admit(TRAIN, "train pod creates its own node's result", True, body=task_result(TRAIN_NODE, RUN)),
    Admit(TRAIN, "train pod patches its own node's result", True,
          resource="workflowtaskresults.argoproj.io", name=TRAIN_NODE,
          patch={"outputs": {"parameters": [{"name": "train", "value": "{}"}]}}),
    Admit(TRAIN, "train pod marks its own result complete", True,
          resource="workflowtaskresults.argoproj.io", name=TRAIN_NODE,
          patch={"metadata": {"labels": {"workflows.argoproj.io/report-outputs-completed": "true"}}}),
    Admit(TRAIN, "train pod creates another node's result of its own run", False, TR,
          body=task_result(f"{RUN}-1111111111", RUN)),
    Admit(TRAIN, "train pod creates a result of another run", False, TR,
          body=task_result(f"{OTHER}-2233445566", OTHER)),
    Admit(TRAIN, "train pod creates its node's name under another run's label", False, TR,
          body=task_result(TRAIN_NODE + "0", OTHER)),
    Admit(TRAIN, "train pod patches another run's result", False, TR,
          resource="workflowtaskresults.argoproj.io", name=OTHER_NODE,
          patch={"outputs": {"parameters": [{"name": "infra", "value": "{}"}]}}),
    Admit(TRAIN, "train pod moves its own result to another run", False, TR,
          resource="workflowtaskresults.argoproj.io", name=TRAIN_NODE,
          patch={"metadata": {"labels": {"workflows.argoproj.io/workflow": OTHER}}}),
    Admit(UNBOUND_TRAIN, "a token bound to no pod creates a result", False, TR,
          body=task_result(TRAIN_NODE, RUN)),
    Admit(run_step("provision"), "provision pod (burst-run) creates its own node's result", True,
          body=task_result(f"{RUN}-1234567", RUN)),
    Admit(run_step("provision"), "provision pod creates train's result of its run", False, TR,
          body=task_result(f"{RUN}-7654321", RUN)),
    Admit(SUBMITTER, "submitter creates a result", False, body=task_result(f"{RUN}-99", RUN)),
    # -- the run's own identities: made by its own steps, for it only ---------------------------
    Admit(run_step("run-service-account"), "run-service-account step applies burst-<run>", True,
          body=run_account(f"burst-{RUN}-x")),
    Admit(run_step("region-service-account"), "region-service-account step: burst-<run>-<region>",
          True, body=run_account(f"burst-{RUN}-ap-southeast-1")),
    Admit(run_step("run-service-account"), "patches its own account's IAM role", True,
          resource="serviceaccounts", name=f"burst-{RUN}",
          patch={"metadata": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}}}),
    Admit(run_step("run-service-account"), "patches another run's account", False, RA,
          resource="serviceaccounts", name=f"burst-{OTHER}",
          patch={"metadata": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}}}),
    Admit(run_step("run-service-account"), "patches burst-reaper's IAM role", False, RA,
          resource="serviceaccounts", name="burst-reaper",
          patch={"metadata": {"annotations": {"eks.amazonaws.com/role-arn": "arn:aws:iam::1:role/r"}}}),
    Admit(run_step("run-service-account"), "creates another run's account name", False, RA,
          body=run_account(f"burst-{OTHER}x")),
    Admit(run_step("run-service-account"), "creates an account with a token Secret", False, RA,
          body=run_account(f"burst-{RUN}-y", secrets=[{"name": "burst-run-token"}])),
    Admit(run_step("provision"), "provision pod (burst-run) creates the run's account", False, RA,
          body=run_account(f"burst-{RUN}-z")),
    Admit(run_step("run-role-binding"), "run-role-binding step binds burst-executor to its account",
          True, body=run_binding(f"burst-{RUN}-ap-southeast-1")),
    Admit(run_step("run-role-binding"), "binds Role burst-run to its account", False, RB,
          body={**run_binding(f"burst-{RUN}-b"), "roleRef": {
              "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "burst-run"}}),
    Admit(run_step("run-role-binding"), "binds burst-executor to another run's account", False, RB,
          body=run_binding(f"burst-{OTHER}")),
    Admit(run_step("run-role-binding"), "binds burst-executor to a group", False, RB,
          body={**run_binding(f"burst-{RUN}-c"), "subjects": [
              {"kind": "Group", "name": "burst:submitters", "apiGroup": "rbac.authorization.k8s.io"}]}),
    Admit(run_step("train-gang"), "train-gang step creates the gang as burst-<run>", True,
          body=gang(f"burst-{RUN}")),
    Admit(run_step("train-gang"), "creates a gang that runs as burst-run", False, RG,
          body=gang("burst-run")),
    Admit(run_step("train-gang"), "creates a gang that runs as another run's account", False, RG,
          body=gang(f"burst-{OTHER}")),
    Admit(VOLCANO, "Volcano's controller updates a gang", True, resource="jobs.batch.volcano.sh",
          name=GANG, patch={"metadata": {"labels": {"volcano.sh/x": "y"}}}),
    # -- pods: whoever creates them ----------------------------------------------------------------
    Admit(ARGO_CONTROLLER, "Argo step pod as burst-run", True, body=argo_pod("burst-run")),
    Admit(ARGO_CONTROLLER, "Argo step pod as burst-reaper", True,
          body=argo_pod("burst-reaper", run="burst-reaper-1700000000")),
    Admit(ARGO_CONTROLLER, "Argo train pod as its run's account", True,
          body=argo_pod(f"burst-{RUN}")),
    Admit(ARGO_CONTROLLER, "Argo pod as another run's account", False, PI,
          body=argo_pod(f"burst-{OTHER}")),
    Admit(ARGO_CONTROLLER, "Argo pod as another team's account", False, PI,
          body=argo_pod("team-b-deployer")),
    Admit(ARGO_CONTROLLER, "Argo pod whose two run labels disagree", False, PI,
          body=pod(f"burst-{OTHER}", {"workflows.argoproj.io/workflow": RUN,
                                      "burst.dev/run-id": OTHER})),
    Admit(VOLCANO, "gang pod as its run's account", True,
          body=pod(f"burst-{RUN}", {"burst.dev/run-id": RUN})),
    Admit(VOLCANO, "gang pod as burst-run", False, PI, body=pod("burst-run", {"burst.dev/run-id": RUN})),
    Admit(ARGO_CONTROLLER, "unlabelled pod as burst-run", False, PI, body=pod("burst-run", {})),
)  # fmt: skip
