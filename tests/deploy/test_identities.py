"""Identities and tokens: every verb each identity needs (Argo's executor, the workflow's
resource steps, the reaper, the CI submitter) against what deploy/rbac.yaml and the workflow's
own RoleBinding grant, and nothing more; the pods' API tokens are projected ones, never a
legacy token Secret. The rules and their sources: tests/deploy/rbac_rules.py. Walk:
docs/reference/deploy-rbac.md."""

from __future__ import annotations

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
