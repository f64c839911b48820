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
COMPILED = REPO / "burst" / "pipelines" / "compiled"
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
    "burst-regional": (("train", "aggregate"), "provision"),
}
#: burst-regional's step templates before issue 42 (its own step modules)
BEFORE_42 = {"train": "regional-worker", "aggregate": "regional-aggregator"}
BEFORE_42["provision"] = "regional-provision"


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
        if m["metadata"]["name"] == "burst-regional" and "place" not in templates:
            templates.update({new: templates[old] for new, old in BEFORE_42.items()})
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


#: the one objectSelector a binding may add: not the runs Argo's controller makes of a
#: CronWorkflow (a label only exempt identities may set: burst-workflows refuses Argo's labels
#: but the creator's), so that no missing params stop the reaper
CRON_RUNS_EXCLUDED = {"matchExpressions": [
    {"key": "workflows.argoproj.io/cron-workflow", "operator": "DoesNotExist"}]}  # fmt: skip


def _shipped_templates() -> set[str]:
    return {
        d["metadata"]["name"] for p in (DEPLOY / "argo").glob("*.yaml") for d in _docs(p)
        if d["kind"] == "WorkflowTemplate"
    }  # fmt: skip


def _narrowed(binding: dict[str, Any], policies: dict[str, dict[str, Any]]) -> str:
    """How a binding judges less than every request of the namespace, or picks params it
    should not ("" when it does neither): params only as a WorkflowTemplate deploy/ ships, by
    name, in the request's own namespace, refusing when it is missing; an objectSelector only
    CRON_RUNS_EXCLUDED."""
    spec = binding["spec"]
    policy = policies.get(spec["policyName"], {}).get("spec", {})
    kind = policy.get("paramKind")
    ref = spec.get("paramRef")
    objects = (spec.get("matchResources") or {}).get("objectSelector")
    if objects and objects != CRON_RUNS_EXCLUDED:
        return f"objectSelector {objects}"
    if kind is None and ref is None:
        return ""
    if kind != {"apiVersion": "argoproj.io/v1alpha1", "kind": "WorkflowTemplate"}:
        return f"params of kind {kind}"
    if ref is None:
        return "no paramRef: its policy would judge with no params"
    if set(ref) != {"name", "parameterNotFoundAction"} or ref["parameterNotFoundAction"] != "Deny":
        return f"paramRef {ref}: a name in the request's namespace, Deny when missing"
    if ref["name"] not in _shipped_templates():
        return f"params {ref['name']}, which deploy/argo does not ship"
    return ""


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
        elif selector.get("matchExpressions") or _narrowed(b, policies):
            out.append(f"binding {b['metadata']['name']}: more than a label selects "
                       f"({_narrowed(b, policies) or 'namespace expressions'})")  # fmt: skip
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


def test_the_checks_see_a_binding_that_judges_less_or_with_other_params() -> None:
    """A stored-templates binding that lets a missing WorkflowTemplate admit (Allow), compares
    with a WorkflowTemplate deploy/ does not ship, judges with no params, or skips more runs
    than the controller's CronWorkflow runs is not counted as binding its policy."""
    docs, ns = _admission()
    name = "burst-stored-templates-burst-train"
    for change in (
        lambda b: b["spec"]["paramRef"].update(parameterNotFoundAction="Allow"),
        lambda b: b["spec"]["paramRef"].update(name="team-b-pipeline"),
        lambda b: b["spec"]["paramRef"].update(namespace="team-b"),
        lambda b: b["spec"].pop("paramRef"),
        lambda b: b["spec"]["matchResources"].update(
            objectSelector={"matchLabels": {"burst.dev/job": "x"}}),
    ):  # fmt: skip
        broken = copy.deepcopy(docs)
        change(next(d for d in broken if d["metadata"]["name"] == name))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sys.modules[__name__], "_admission", lambda before=False, b=broken: (b, ns))
            assert any(name in p and "more than a label" in p for p in admission_problems())


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


# -- stored templates: what Argo's submit paths write in a run's status ----------------------------
#
# Argo's CreateWorkflow (`burst submit`) and SubmitWorkflow (`argo submit --from`) store every
# template of the WorkflowTemplate in the run's status.storedTemplates, which the controller runs
# in place of the WorkflowTemplate's; burst-stored-templates compares each entry with its params,
# the WorkflowTemplate itself (cases: rbac_rules.ADMIT, argo_submitted_workflow).

STORED = "burst-stored-templates"
#: template kinds whose stored form (Go's zero values) the policy does not model: compared
#: exactly, a run of a WorkflowTemplate that used one would be refused
UNMODELLED = {"dag", "script", "containerSet"}


def stored_template_problems(
    docs: list[dict[str, Any]] | None = None, templates: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """Every WorkflowTemplate a run may call (burst-workflows' templates) is the params of a
    binding of burst-stored-templates, and nothing else is; each uses only the template shapes
    whose stored form the policy knows: no dag, script or containerSet, no inline step
    template, every step named and no name twice in a template (the policy pairs a stored step
    with the template's step of the same name)."""
    docs = docs if docs is not None else _admission()[0]
    policies = _policies(docs)
    if STORED not in policies:
        return [f"no policy {STORED}: a submitter's status.storedTemplates would run as written"]
    callable_ = set(_variable(policies["burst-workflows"], "templates"))
    bound = {
        d["spec"]["paramRef"]["name"] for d in docs
        if d["kind"] == "ValidatingAdmissionPolicyBinding" and d["spec"]["policyName"] == STORED
        and d["spec"].get("paramRef")
    }  # fmt: skip
    out = [f"a run may call {n}, whose stored templates no binding of {STORED} compares"
           for n in sorted(callable_ - bound)]  # fmt: skip
    out += [f"{STORED} is bound to {n}, which no run may call" for n in sorted(bound - callable_)]
    if templates is None:
        templates = {
            d["metadata"]["name"]: d for p in sorted((DEPLOY / "argo").glob("*.yaml"))
            for d in _docs(p) if d["kind"] == "WorkflowTemplate"
        }  # fmt: skip
    for name in sorted(callable_ & set(templates)):
        for t in templates[name]["spec"]["templates"]:
            where = f"{name}/{t['name']}"
            if UNMODELLED & set(t):
                out.append(f"{where}: {sorted(UNMODELLED & set(t))}, whose stored form "
                           f"{STORED} does not model")  # fmt: skip
            steps = [step for group in t.get("steps") or [] for step in group]
            names = [step.get("name") for step in steps]
            if any("inline" in step for step in steps):
                out.append(f"{where}: an inline step template (stored under .../inline/<step>)")
            if None in names or len(set(names)) != len(names):
                out.append(f"{where}: step names {names} are not each once")
    return out


def test_every_template_a_run_may_call_has_its_stored_templates_compared() -> None:
    assert stored_template_problems() == []


def test_the_stored_template_check_sees_a_missing_binding_and_an_unmodelled_shape() -> None:
    docs, _ = _admission()
    unbound = [d for d in docs if d["metadata"]["name"] != f"{STORED}-burst-regional"]
    assert stored_template_problems(unbound) == [
        f"a run may call burst-regional, whose stored templates no binding of {STORED} compares"
    ]
    (wt,) = _docs(DEPLOY / "argo" / "burst-train.yaml")
    main = next(t for t in wt["spec"]["templates"] if t["name"] == "main")
    main["steps"][0][0]["inline"] = {"container": {"image": "x"}}
    main["steps"][-1].append(dict(main["steps"][-1][0]))
    wt["spec"]["templates"].append({"name": "fan", "dag": {"tasks": []}})
    problems = stored_template_problems(templates={"burst-train": wt})
    assert len(problems) == 3, problems


def test_the_cases_stored_templates_are_every_shipped_template() -> None:
    """rbac_rules.argo_stored_templates, the cases' model of what Argo stores (the engines tier
    admits it; it equalled what Argo's CLI and server stored on kube-apiserver v1.35.4), holds
    every template of each WorkflowTemplate a run may call, with the fields that choose a pod's
    identity and code as shipped."""
    from rbac_rules import argo_stored_templates

    for name in _variable(_policies(_admission()[0])["burst-workflows"], "templates"):
        (wt,) = _docs(DEPLOY / "argo" / f"{name}.yaml")
        stored = argo_stored_templates(name)
        assert set(stored) == {f"namespaced/{name}/{t['name']}" for t in wt["spec"]["templates"]}
        for t in wt["spec"]["templates"]:
            s = stored[f"namespaced/{name}/{t['name']}"]
            for k in ("serviceAccountName", "podSpecPatch", "securityContext", "resource"):
                assert s.get(k) == t.get(k), (t["name"], k)
            for k in ("image", "command", "args", "env", "securityContext"):
                assert (s.get("container") or {}).get(k) == (t.get("container") or {}).get(k)


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


ARGO_STRICT = {"arguments", "entrypoint", "shutdown", "suspend", "activeDeadlineSeconds",
               "priority", "ttlStrategy", "podGC", "volumeClaimGC", "archiveLogs",
               "workflowMetadata", "workflowTemplateRef", "metrics", "artifactGC"}  # fmt: skip


def _argo_objects() -> list[dict[str, Any]]:
    return [d for p in sorted((DEPLOY / "argo").glob("*.yaml")) for d in _docs(p)]


def reference_mode_problems(
    config: dict[str, Any] | None = None, objects: list[dict[str, Any]] | None = None
) -> list[str]:
    """deploy/controller sets ``workflowRestrictions.templateReferencing: Secure``: Argo's
    controller then runs only Workflows that call a WorkflowTemplate by workflowTemplateRef and
    set nothing but allowed fields (v4.0.5 workflow/controller/operator.go setExecWorkflow:
    "workflows must use workflowTemplateRef to be executed when the controller is in reference
    mode"; util/merge.go ValidateUserOverrides), and fetches that template at every
    reconciliation (setStoredWfSpec: a missing one ends the run in Error). The CronWorkflows
    deploy/ ships create their Workflows from their own workflowSpec (workflow/common/convert.go
    toWorkflow): each must be such a call, of a WorkflowTemplate deploy/ ships in the same
    namespace, passing only parameters it declares, or its runs end in Error at their first
    reconciliation (the reaper's among them: expired runs would bill on)."""
    cm = config if config is not None else _controller_config()
    restrictions = yaml.safe_load((cm.get("data") or {}).get("workflowRestrictions") or "{}") or {}
    out = []
    if restrictions.get("templateReferencing") != "Secure":
        out.append(
            "deploy/controller: templateReferencing is "
            f"{restrictions.get('templateReferencing')!r}, not 'Secure': a Workflow may hold "
            "its own templates and choose its pods' identity and shape"
        )
    docs = objects if objects is not None else _argo_objects()
    templates = {d["metadata"]["name"]: d for d in docs if d["kind"] == "WorkflowTemplate"}
    for d in docs:
        if d["kind"] != "CronWorkflow":
            continue
        name = d["metadata"]["name"]
        spec = d["spec"]["workflowSpec"]
        ref = spec.get("workflowTemplateRef") or {}
        if "workflowTemplateRef" not in spec:
            out.append(f"CronWorkflow {name}: its workflows hold their own templates, which "
                       "the controller refuses in reference mode")  # fmt: skip
            continue
        if set(spec) - ARGO_STRICT:
            out.append(f"CronWorkflow {name}: sets {sorted(set(spec) - ARGO_STRICT)}")
        if ref.get("clusterScope") or ref.get("name") not in templates:
            out.append(f"CronWorkflow {name}: calls {ref}, which deploy/argo does not ship")
            continue
        declared = {
            p["name"] for p in templates[ref["name"]]["spec"].get("arguments", {}).get(
                "parameters") or []
        }  # fmt: skip
        passed = {p["name"] for p in (spec.get("arguments") or {}).get("parameters") or []}
        if passed - declared:
            out.append(f"CronWorkflow {name}: passes {sorted(passed - declared)}, which "
                       f"{ref['name']} does not declare")  # fmt: skip
    return out


def test_argos_reference_mode_is_secure_and_refuses_nothing_deploy_ships() -> None:
    assert reference_mode_problems() == []


def test_the_reference_mode_check_sees_a_weaker_mode_and_a_cron_it_would_break() -> None:
    """Without Secure (unset, or Strict) the check fails; with it, a CronWorkflow holding its
    templates (the reaper before it called burst-reaper), one calling a template deploy/ does
    not ship, or one setting its own service account would end every reap in Error."""
    for mode in (None, "Strict"):
        weaker = copy.deepcopy(_controller_config())
        weaker["data"].pop("workflowRestrictions")
        if mode:
            weaker["data"]["workflowRestrictions"] = f"templateReferencing: {mode}\n"
        assert any("not 'Secure'" in p for p in reference_mode_problems(weaker)), mode
    objects = _argo_objects()
    inline = _load(BEFORE / "pipelines_compiled_burst-reaper.yaml")
    assert inline["kind"] == "CronWorkflow"
    assert any("hold their own templates" in p for p in reference_mode_problems(None, [inline]))
    no_template = [d for d in objects if d["kind"] != "WorkflowTemplate"]
    assert any("does not ship" in p for p in reference_mode_problems(None, no_template))
    widened = copy.deepcopy(objects)
    cron = next(d for d in widened if d["kind"] == "CronWorkflow")
    cron["spec"]["workflowSpec"]["serviceAccountName"] = "burst-run"
    cron["spec"]["workflowSpec"]["arguments"]["parameters"].append({"name": "x", "value": "1"})
    problems = reference_mode_problems(None, widened)
    assert any("sets ['serviceAccountName']" in p for p in problems)
    assert any("passes ['x']" in p for p in problems)


def test_the_lint_knows_the_fields_argo_lets_a_reference_set() -> None:
    """burst.runner.lint refuses, in a spec that calls a template, what reference mode would."""
    from burst.runner.lint import REFERENCE_FIELDS

    assert set(REFERENCE_FIELDS) == ARGO_STRICT


def reaper_call_problems(docs: list[dict[str, Any]] | None = None) -> list[str]:
    """The templates only CronWorkflows call (the reaper) are run by Argo's controller, which
    creates a CronWorkflow's Workflows (workflow/cron/operator.go, with the controller's
    identity) and which the workflow policy exempts; nobody else may call them: a submitter
    calling burst-reaper would choose its arguments, such as the server the reaper sends its
    own token to (argo-server), and destroy with the reaper's role."""
    docs = docs if docs is not None else _admission()[0]
    policy = _policies(docs)["burst-workflows"]
    callable_ = set(_variable(policy, "templates"))
    conditions = {c["name"] for c in policy["spec"].get("matchConditions") or []}
    out = []
    for d in _argo_objects():
        if d["kind"] != "CronWorkflow":
            continue
        called = d["spec"]["workflowSpec"]["workflowTemplateRef"]["name"]
        if called in callable_:
            out.append(f"a submitter may call {called}, which only CronWorkflow "
                       f"{d['metadata']['name']} should")  # fmt: skip
        if "not-the-argo-controller" not in conditions:
            out.append(f"burst-workflows refuses the Workflows Argo's controller creates for "
                       f"CronWorkflow {d['metadata']['name']}")  # fmt: skip
    return out


def test_only_argos_controller_runs_the_reaper() -> None:
    assert reaper_call_problems() == []
    docs, _ = _admission()
    policy = _policies(docs)["burst-workflows"]
    var = next(v for v in policy["spec"]["variables"] if v["name"] == "templates")
    var["expression"] = "['burst-train', 'burst-regional', 'burst-reaper']"
    assert any("may call burst-reaper" in p for p in reaper_call_problems(docs))
    policy["spec"]["matchConditions"] = [
        c for c in policy["spec"]["matchConditions"] if c["name"] != "not-the-argo-controller"
    ]
    assert any("refuses the Workflows" in p for p in reaper_call_problems(docs))
