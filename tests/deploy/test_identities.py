"""Identities and tokens: every verb each identity needs (Argo's executor, the workflow's
resource steps, the reaper, the CI submitter) against what deploy/rbac.yaml and the workflow's
own RoleBinding grant, and nothing more; the pods' API tokens are projected ones, never a
legacy token Secret; who may run as whom (deploy/admission's ValidatingAdmissionPolicies, what
can be read of them offline). The rules, their sources and the identity x action cases the
engines tier runs: tests/deploy/rbac_rules.py. Walk: docs/reference/deploy-rbac.md."""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from argo_pods import pods, workflow_spec
from rbac_rules import (
    REAPER_NEEDS,
    SUBMITTER_NEEDS,
    Need,
    Subject,
    allows,
    grants,
    pod_needs,
    template_bindings,
)

REPO = Path(__file__).resolve().parents[2]
COMPILED = REPO / "pipelines" / "compiled"
DEPLOY = REPO / "deploy"
BEFORE = Path(__file__).resolve().parent / "before"
TEMPLATES = ("burst-train", "burst-regional", "burst-reaper")
SUBMITTERS = Subject("Group", "burst:submitters")
REAPER = Subject("ServiceAccount", "burst-reaper")


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]


def _state(before: bool) -> tuple[list[dict[str, Any]], list[dict[str, Any]], dict[str, Any]]:
    if before:
        manifests = [_load(BEFORE / f"pipelines_compiled_{n}.yaml") for n in TEMPLATES]
        return manifests, _docs(BEFORE / "deploy_rbac.yaml"), {}
    from argo_pods import executor_config

    manifests = [_load(COMPILED / f"{n}.yaml") for n in TEMPLATES]
    return manifests, _docs(DEPLOY / "rbac.yaml"), executor_config()


def rbac_problems(before: bool = False) -> list[str]:
    manifests, rbac, executor = _state(before)
    granted = grants(rbac)
    # the roles the workflows bind for their runs' own accounts
    for m in manifests:
        granted_by_run = grants([d for d in rbac if d["kind"] == "Role"] + template_bindings(m))
        for s, triples in granted_by_run.items():
            granted.setdefault(s, set()).update(triples)
    needed: dict[Subject, set[Need]] = {SUBMITTERS: set(SUBMITTER_NEEDS), REAPER: set(REAPER_NEEDS)}
    for m in manifests:
        for s, triples in pod_needs(pods(m, executor), m).items():
            needed.setdefault(s, set()).update(triples)
    out = []
    for s, triples in sorted(needed.items(), key=lambda kv: (kv[0].kind, kv[0].name)):
        for need in sorted(triples):
            if not allows(granted.get(s, set()), need):
                out.append(f"{s.kind} {s.name} needs {need} and is not granted it")
    for s, triples in sorted(granted.items(), key=lambda kv: (kv[0].kind, kv[0].name)):
        for grant in sorted(triples):
            if not any(allows({grant}, n) for n in needed.get(s, set())):
                out.append(f"{s.kind} {s.name} is granted {grant} and never needs it")
            if "*" in grant:
                out.append(f"{s.kind} {s.name}: wildcard {grant}")
    return out


def token_problems(before: bool = False) -> list[str]:
    """Argo's ``executor.serviceAccountName`` mounts the Secret ``<name>.service-account-token``
    (workflowpod.go setupServiceAccount -> util/secrets TokenNameForServiceAccount); Kubernetes
    >= 1.24 creates no such Secret (LegacyServiceAccountTokenNoAutoGeneration), so the pod waits
    in ContainerCreating. Every pod's API token must be its own account's projected token, and
    deploy/ ships no legacy token Secret."""
    manifests, _, executor = _state(before)
    shipped = [
        d for p in sorted(DEPLOY.rglob("*.yaml")) for d in _docs(p)
        if d.get("kind") == "Secret"
    ]  # fmt: skip
    out = [
        f"deploy/ ships the legacy token Secret {d['metadata']['name']}"
        for d in shipped
        if d.get("type") == "kubernetes.io/service-account-token"
    ]
    for m in manifests:
        for p in pods(m, executor):
            if p.labels.get("executor-sa"):
                out.append(
                    f"{p.name}: executor.serviceAccountName {p.labels['executor-sa']} mounts "
                    f"the Secret {p.labels['executor-sa']}.service-account-token, which nothing "
                    "creates on Kubernetes >= 1.24"
                )
        wf = workflow_spec(m)
        if wf.get("automountServiceAccountToken") is False:
            out.append(f"{m['metadata']['name']}: automountServiceAccountToken false")
    return out


def service_account_problems(before: bool = False) -> list[str]:
    """Every pod's service account exists: deploy/ ships it, or the workflow creates it in a
    step that runs before the pod's on every path (ServiceAccount admission refuses a pod whose
    account is missing: plugin/pkg/admission/serviceaccount)."""
    manifests, _, executor = _state(before)
    shipped = {
        d["metadata"]["name"] for d in _docs(DEPLOY / "serviceaccounts.yaml")
        if d["kind"] == "ServiceAccount"
    }  # fmt: skip
    out = []
    for m in manifests:
        templates = {t["name"]: t for t in workflow_spec(m)["templates"]}
        made = {
            t["name"]: yaml.safe_load(t["resource"]["manifest"])["metadata"]["name"]
            for t in templates.values()
            if "kind: ServiceAccount" in ((t.get("resource") or {}).get("manifest") or "")
        }
        for p in pods(m, executor):
            if p.service_account in shipped:
                continue
            # the steps templates that run this pod's template: an earlier group must make it
            top = p.template.split("/")[0]
            for st in templates.values():
                groups = st.get("steps") or []
                for i, group in enumerate(groups):
                    if any(s["template"] == top for s in group):
                        before_it = {s["template"] for g in groups[:i] for s in g}
                        if not any(made.get(b) == p.service_account for b in before_it):
                            out.append(
                                f"{p.name} runs as {p.service_account}, which nothing in "
                                f"{st['name']} creates before it"
                            )
    return sorted(set(out))


#: The pods that open a run's stores, and the template whose ``--run-id`` is their stack's id.
STORE_PODS = {
    "burst-train": (("train",), "provision"),
    "burst-regional": (("regional-worker", "regional-aggregator"), "regional-provision"),
}


def stack_identity_problems(before: bool = False) -> list[str]:
    """Every pod that reads or writes a run's stores runs as the one account its stack's pod
    role trusts: ``burst-<stack run id>`` (terraform/modules/aws-run-iam: the trust names
    system:serviceaccount:<ns>:burst-<run_id>; IRSA's webhook injects the role of the pod's
    own account, amazon-eks-pod-identity-webhook pkg/handler mutatePod). Walk:
    docs/reference/walk-burst-regional.md (the regional roles ran as burst-run)."""
    manifests, _, _ = _state(before)
    out = []
    for m in manifests:
        pods_, owner = STORE_PODS.get(m["metadata"]["name"], ((), ""))
        templates = {t["name"]: t for t in workflow_spec(m)["templates"]}
        for name in pods_:
            args = templates[owner]["container"]["args"]
            trusted = "burst-" + args[args.index("--run-id") + 1]
            got = templates[name].get("serviceAccountName") or workflow_spec(m).get(
                "serviceAccountName"
            )
            if got != trusted:
                out.append(f"{m['metadata']['name']}/{name} runs as {got}, not {trusted}")
    return out


CHECKS = {
    "rbac": rbac_problems,
    "tokens": token_problems,
    "accounts": service_account_problems,
    "stack-identity": stack_identity_problems,
}


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_before_issue_28_the_check_finds_defects(check: str) -> None:
    assert CHECKS[check](before=True)


@pytest.mark.parametrize("check", sorted(CHECKS))
def test_the_shipped_artifacts_pass(check: str) -> None:
    assert CHECKS[check]() == []


def test_the_submitter_role_is_what_the_ci_identity_is_mapped_to() -> None:
    """docs/cluster-setup.md maps the CI role to the group the submitter Role is bound to."""
    text = (REPO / "docs" / "cluster-setup.md").read_text(encoding="utf-8")
    assert SUBMITTERS.name in text
    assert allows(
        grants(_docs(DEPLOY / "rbac.yaml"))[SUBMITTERS], ("argoproj.io", "workflows", "create")
    )


# -- who may run as whom: deploy/admission -------------------------------------------------------
#
# The ValidatingAdmissionPolicies are decided by a real kube-apiserver in the engines tier (the
# cases: rbac_rules.CAN_I and rbac_rules.ADMIT, each identity x action). Offline, what can be
# read without one: every policy is bound, fails closed and selects the runs' namespace; the
# identities each exempts; and the names the policies hold (templates a run may call, the steps
# that make a run's objects, the fields a run may set) against what the repository ships, so a
# renamed template or a new field of `burst submit` fails here instead of in the cluster.

ADMISSION = DEPLOY / "admission"
CONTROLLER = DEPLOY / "controller"
#: (apiGroup, resource, operation) a submitter or a pod could choose an identity through
GUARDED = (
    ("argoproj.io", "workflows", "CREATE"),
    ("argoproj.io", "workflows", "UPDATE"),
    ("argoproj.io", "workflowtaskresults", "CREATE"),
    ("argoproj.io", "workflowtaskresults", "UPDATE"),
    ("", "serviceaccounts", "CREATE"),
    ("", "serviceaccounts", "UPDATE"),
    ("rbac.authorization.k8s.io", "rolebindings", "CREATE"),
    ("rbac.authorization.k8s.io", "rolebindings", "UPDATE"),
    ("batch.volcano.sh", "jobs", "CREATE"),
    ("batch.volcano.sh", "jobs", "UPDATE"),
    ("", "pods", "CREATE"),
)
ADMINS = "not-an-administrator"
#: the exemptions a policy may make (matchConditions by name), and the ones each must not make
EXEMPTIONS = {ADMINS, "not-a-kubernetes-controller", "not-the-argo-controller",
              "not-another-namespaces-controller-updating"}  # fmt: skip


def _admission(before: bool = False) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(policies and bindings, the runs' Namespace) as deploy/ ships them (before: none)."""
    if before:
        return [], {"metadata": {"labels": {}}}
    docs = [d for p in sorted(ADMISSION.glob("*.yaml")) for d in _docs(p)]
    (ns,) = _docs(DEPLOY / "namespace.yaml")
    return docs, ns


def _variable(policy: dict[str, Any], name: str) -> Any:
    """A policy variable whose expression is a literal (a list or a map of lists)."""
    import ast

    (expr,) = [v["expression"] for v in policy["spec"].get("variables") or [] if v["name"] == name]
    return ast.literal_eval(" ".join(expr.split()))


def _policies(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"}


def admission_problems(before: bool = False) -> list[str]:
    """Every guarded (resource, operation) is matched by a policy that fails closed and is bound,
    denying, to the runs' namespace; every policy is in the kustomization."""
    docs, ns = _admission(before)
    policies = _policies(docs)
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    labels = ns["metadata"].get("labels") or {}
    out = []
    bound: set[str] = set()
    for b in bindings:
        spec = b["spec"]
        selector = (spec.get("matchResources") or {}).get("namespaceSelector") or {}
        wanted = selector.get("matchLabels") or {}
        if spec["validationActions"] != ["Deny"]:
            out.append(f"binding {b['metadata']['name']}: actions {spec['validationActions']}")
        elif not wanted or any(labels.get(k) != v for k, v in wanted.items()):
            out.append(f"binding {b['metadata']['name']}: selects no namespace deploy/ makes")
        elif selector.get("matchExpressions") or spec.get("paramRef"):
            out.append(f"binding {b['metadata']['name']}: more than a label selects")
        else:
            bound.add(spec["policyName"])
    for name, p in policies.items():
        if p["spec"].get("failurePolicy") != "Fail":
            out.append(f"policy {name}: an evaluation error would admit (failurePolicy)")
        if name not in bound:
            out.append(f"policy {name}: bound to no runs' namespace")
    kustomized = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"]
    for path in sorted(ADMISSION.glob("*.yaml")):
        if str(path.relative_to(DEPLOY)) not in kustomized:
            out.append(f"{path.relative_to(DEPLOY)} is not in deploy/kustomization.yaml")
    for group, resource, op in GUARDED:
        if not any(
            name in bound
            and group in rule["apiGroups"] and resource in rule["resources"]
            and op in rule["operations"]
            for name, p in policies.items()
            for rule in p["spec"]["matchConstraints"]["resourceRules"]
        ):  # fmt: skip
            out.append(f"nothing refuses a {op} of {group or 'core'}/{resource} in the namespace")
    return out


def exemption_problems(before: bool = False) -> list[str]:
    """Who each policy lets through: administrators always; the Argo controller (named as
    deploy/controller installs it) and Kubernetes' controllers where they write; never for pods,
    which those controllers create for someone else."""
    docs, _ = _admission(before)
    controller_ns = yaml.safe_load((CONTROLLER / "kustomization.yaml").read_text())["namespace"]
    argo = f"'system:serviceaccount:{controller_ns}:argo'"
    out = []
    texts: dict[str, set[str]] = {}
    for name, p in _policies(docs).items():
        conditions = {c["name"]: " ".join(c["expression"].split())
                      for c in p["spec"].get("matchConditions") or []}  # fmt: skip
        for c, text in conditions.items():
            texts.setdefault(c, set()).add(text)
            if c not in EXEMPTIONS:
                out.append(f"policy {name}: unknown exemption {c}")
        if ADMINS not in conditions:
            out.append(f"policy {name}: administrators are held to it")
        if "pods" in str(p["spec"]["matchConstraints"]) and set(conditions) != {ADMINS}:
            out.append(f"policy {name}: pods are judged whoever creates them, exempts {conditions}")
        if (
            "not-the-argo-controller" in conditions
            and argo not in conditions["not-the-argo-controller"]
        ):
            out.append(f"policy {name}: exempts an Argo controller deploy/controller does not name")
    for c, variants in texts.items():
        if len(variants) > 1:
            out.append(f"exemption {c} reads differently in different policies")
    return out


def test_before_the_admission_policies_nothing_refused_a_chosen_identity() -> None:
    assert admission_problems(before=True)


def test_every_guarded_write_is_judged_in_the_runs_namespace() -> None:
    assert admission_problems() == []


def test_the_checks_see_a_policy_that_fails_open_or_is_unbound() -> None:
    docs, ns = _admission()
    open_ = copy.deepcopy(docs)
    next(d for d in open_ if d["kind"] == "ValidatingAdmissionPolicy")["spec"]["failurePolicy"] = (
        "Ignore"
    )
    unbound = [d for d in docs if d["kind"] != "ValidatingAdmissionPolicyBinding"]
    for broken in (open_, unbound):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys.modules[__name__], "_admission", lambda before=False, b=broken: (b, ns))
            assert admission_problems()


def test_exemptions_are_the_documented_ones() -> None:
    assert exemption_problems() == []
    docs, _ = _admission()
    pods = next(d for d in docs if d["metadata"]["name"] == "burst-pod-identities")
    pods["spec"]["matchConditions"].append(
        {"name": "not-the-argo-controller", "expression": "request.userInfo.username != 'x'"}
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys.modules[__name__], "_admission", lambda before=False: (docs, {}))
        assert exemption_problems()


def test_a_run_may_call_exactly_the_templates_burst_submit_calls() -> None:
    from burst.runner.argo import REGIONAL_TEMPLATE, TEMPLATE_NAME

    policy = _policies(_admission()[0])["burst-workflows"]
    shipped = {
        d["metadata"]["name"] for p in (DEPLOY / "argo").glob("*.yaml") for d in _docs(p)
        if d["kind"] == "WorkflowTemplate"
    }  # fmt: skip
    assert set(_variable(policy, "templates")) == {TEMPLATE_NAME, REGIONAL_TEMPLATE}
    assert {TEMPLATE_NAME, REGIONAL_TEMPLATE} <= shipped


@pytest.mark.parametrize("example", ["quickstart.yaml", "regional.yaml"])
def test_what_burst_submit_sends_is_what_the_workflow_policy_admits(
    example: str, tmp_path: Path
) -> None:
    """burst.runner.argo.build_workflow against the policy's lists: the fields a run sets,
    parameters with a name and a value, a generated name, none of Argo's labels."""
    from burst.runner.argo import build_workflow

    text = (REPO / "examples" / example).read_text(encoding="utf-8")
    ref = next(ln for ln in text.splitlines() if ln.strip().startswith("reference:"))
    pinned = "ghcr.io/example/trainer@sha256:" + "a" * 64  # what submit accepts
    spec = tmp_path / example
    spec.write_text(text.replace(ref, ref.split("reference:")[0] + f"reference: {pinned}"))
    wf = build_workflow(spec)
    policy = _policies(_admission()[0])["burst-workflows"]
    assert set(wf["spec"]) <= set(_variable(policy, "runFields"))
    assert wf["spec"]["workflowTemplateRef"]["name"] in _variable(policy, "templates")
    assert all(set(p) <= {"name", "value"} for p in wf["spec"]["arguments"]["parameters"])
    assert wf["metadata"]["generateName"] and "name" not in wf["metadata"]
    assert not [
        k for k in wf["metadata"].get("labels") or {} if k.startswith("workflows.argoproj.io/")
    ]


def test_the_fields_a_run_sets_are_workflow_spec_fields() -> None:
    """The allow-list names real WorkflowSpec fields (a typo would refuse every run, or let a
    field through under another name) and only ones Argo's Strict mode also lets a run set
    (argo-workflows v4.0.5 workflow/util/merge.go allowedUserOverrideFields)."""
    schema = json.loads((REPO / "tests" / "data" / "argo-workflows-v4.0.5.schema.json").read_text())
    fields = schema["definitions"]["io.argoproj.workflow.v1alpha1.WorkflowSpec"]["properties"]
    argo_strict = {"arguments", "entrypoint", "shutdown", "suspend", "activeDeadlineSeconds",
                   "priority", "ttlStrategy", "podGC", "volumeClaimGC", "archiveLogs",
                   "workflowMetadata", "workflowTemplateRef", "metrics", "artifactGC"}  # fmt: skip
    run_fields = set(_variable(_policies(_admission()[0])["burst-workflows"], "runFields"))
    assert run_fields <= set(fields)
    assert run_fields <= argo_strict


def _resource_steps(kind: str) -> set[str]:
    """The templates of the compiled manifests whose resource step writes a ``kind``."""
    out = set()
    for name in TEMPLATES:
        for t in workflow_spec(_load(COMPILED / f"{name}.yaml"))["templates"]:
            manifest = (t.get("resource") or {}).get("manifest") or ""
            if re.search(rf"^kind: {kind}$", manifest, re.M):
                out.add(t["name"])
    return out


@pytest.mark.parametrize(
    ("policy", "kind"),
    [("burst-run-accounts", "ServiceAccount"), ("burst-run-bindings", "RoleBinding"),
     ("burst-run-gangs", "Job")],
)  # fmt: skip
def test_a_runs_objects_are_made_by_the_steps_that_make_them(policy: str, kind: str) -> None:
    """The steps each policy lets write its kind are the pipelines' resource templates that
    write it (Argo names a step's pod after its template), and the run's objects as those
    templates write them carry what the policies read: the run label, the Workflow owner."""
    makers = set(_variable(_policies(_admission()[0])[policy], "makers"))
    assert makers == _resource_steps(kind)
    for name in TEMPLATES:
        for t in workflow_spec(_load(COMPILED / f"{name}.yaml"))["templates"]:
            r = t.get("resource") or {}
            if t["name"] in makers:
                obj = yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", r["manifest"]))
                assert obj["metadata"]["labels"]["burst.dev/run-id"] == "x", t["name"]
                assert r.get("setOwnerReference") is True, t["name"]


def test_a_runs_account_carries_no_annotation_the_policy_refuses() -> None:
    policy = _policies(_admission()[0])["burst-run-accounts"]
    allowed = re.findall(r"'([^']+)'", next(
        v["expression"] for v in policy["spec"]["validations"] if "annotations" in v["expression"]
    ))  # fmt: skip
    for name in TEMPLATES:
        for t in workflow_spec(_load(COMPILED / f"{name}.yaml"))["templates"]:
            manifest = (t.get("resource") or {}).get("manifest") or ""
            if "kind: ServiceAccount" in manifest:
                obj = yaml.safe_load(re.sub(r"\{\{[^}]*\}\}", "x", manifest))
                assert set(obj["metadata"].get("annotations") or {}) <= set(allowed)


def test_every_policy_has_cases_both_ways() -> None:
    """The cases the engines tier runs (rbac_rules.ADMIT) refuse something through each policy
    and admit something each policy judges; each case's policy exists."""
    from rbac_rules import ADMIT

    names = set(_policies(_admission()[0]))
    refused = {c.policy for c in ADMIT if not c.allowed and c.policy}
    assert refused <= names
    assert refused == names
    allowed_kinds = {(c.body or {}).get("kind") or c.resource for c in ADMIT if c.allowed}
    assert {"Workflow", "WorkflowTaskResult", "ServiceAccount", "RoleBinding", "Job", "Pod",
            "workflows.argoproj.io"} <= allowed_kinds  # fmt: skip


# -- Argo's own restriction: templateReferencing ----------------------------------------------


def _controller_config() -> dict[str, Any]:
    (cm,) = _docs(CONTROLLER / "workflow-controller-configmap.yaml")
    return cm


def reference_mode_problems(config: dict[str, Any] | None = None) -> list[str]:
    """With ``workflowRestrictions.templateReferencing`` Strict or Secure, Argo's controller runs
    only Workflows that call a WorkflowTemplate by workflowTemplateRef and set nothing but
    allowed fields (v4.0.5 workflow/controller/operator.go setExecWorkflow: "workflows must use
    workflowTemplateRef to be executed when the controller is in reference mode"; util/merge.go
    ValidateUserOverrides). The CronWorkflows deploy/ ships create their Workflows from their
    own workflowSpec (workflow/common/convert.go toWorkflow): each must then be such a call, or
    its runs end in Error at their first reconciliation, the reaper's among them."""
    cm = config if config is not None else _controller_config()
    restrictions = yaml.safe_load((cm.get("data") or {}).get("workflowRestrictions") or "{}") or {}
    if restrictions.get("templateReferencing") not in ("Strict", "Secure"):
        return []
    argo_strict = {"arguments", "entrypoint", "shutdown", "suspend", "activeDeadlineSeconds",
                   "priority", "ttlStrategy", "podGC", "volumeClaimGC", "archiveLogs",
                   "workflowMetadata", "workflowTemplateRef", "metrics", "artifactGC"}  # fmt: skip
    out = []
    for path in sorted((DEPLOY / "argo").glob("*.yaml")):
        for d in _docs(path):
            if d["kind"] != "CronWorkflow":
                continue
            spec = d["spec"]["workflowSpec"]
            if "workflowTemplateRef" not in spec:
                out.append(f"CronWorkflow {d['metadata']['name']}: its workflows hold their own "
                           "templates, which the controller refuses in reference mode")  # fmt: skip
            elif set(spec) - argo_strict:
                out.append(
                    f"CronWorkflow {d['metadata']['name']}: sets {sorted(set(spec) - argo_strict)}"
                )
    return out


def test_argos_reference_mode_would_not_refuse_what_deploy_ships() -> None:
    assert reference_mode_problems() == []


def test_the_reference_mode_check_sees_the_reaper_it_would_break() -> None:
    """deploy/controller leaves templateReferencing unset while the burst-reaper CronWorkflow
    holds its templates inline (docs/reference/argo-controller-config.md): set, every reap
    would end in Error and expired runs would bill on. The check sees it."""
    secure = copy.deepcopy(_controller_config())
    secure["data"]["workflowRestrictions"] = "templateReferencing: Secure\n"
    assert reference_mode_problems(secure)
