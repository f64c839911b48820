"""Who may act as whom, decided by a real kube-apiserver: the identity cases of
tests/deploy/rbac_rules.py (FIXTURES, CAN_I, ADMIT) against deploy/'s RBAC (deploy/rbac.yaml)
and its ValidatingAdmissionPolicies (deploy/admission).

- CAN_I: ``kubectl auth can-i VERB RESOURCE -n burst --as=USER --as-group=G...`` (and
  ``--as-user-extra`` for a pod's token), an administrator impersonating each identity: RBAC
  alone.
- ADMIT: a create (``kubectl create``), or one merge PATCH request as Argo's executor sends it
  (``kubectl patch`` would GET first, which burst-executor may not), with the identity's own
  credentials as the API server's authenticators hand them over: a client
  certificate for a person (user and groups, as a cloud's authenticator maps them), a
  service-account token for a controller, and for a step pod a token bound to that pod (a
  TokenRequest bound to the Pod: its userInfo.extra carries authentication.kubernetes.io/
  pod-name, which deploy/admission reads). Each credential is checked once against the case's
  Identity (``kubectl auth whoami``). A refusal must come from the layer the case names: RBAC
  (``User ... cannot VERB resource``) or the ValidatingAdmissionPolicy by name.

Two of the issue's refusals are tests of their own: the submitter running as another service
account, and a run's code patching another workflow's results.

The control plane is this module's own (one to two and a half minutes on 2 cores, most of it
Argo's install, devtools/cluster/argo.py): etcd, kube-apiserver, controller-manager
and scheduler, then Argo's CRDs and install RBAC (no controller: the Workflows the cases
submit must not run), Kyverno's policy CRDs (deploy/kyverno is stored, not enforced), a
stand-in for Volcano's Job CRD (Volcano is not part of the tier), ``kubectl apply -k deploy/``
and the FIXTURES, as a cluster administrator. The session's tier (conftest ``cp``) is not used:
its Argo controller would run every Workflow these cases submit, and Kueue would admit them.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import ssl
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from devtools import engines
from devtools.cluster import argo, kyverno
from devtools.cluster.controlplane import ControlPlane, TierError
from devtools.cluster.tier import REPO

sys.path.insert(0, str(REPO / "tests" / "deploy"))
import rbac_rules as R  # tests/deploy's case data

pytestmark = pytest.mark.cluster

NS = R.NAMESPACE
RBAC = "RBAC"  # the refusing layer when no policy is named
# Volcano's Job kind, schema-less: only the API group, resource and scope matter to RBAC and to
# deploy/admission/run-objects.yaml (burst-run-gangs)
VOLCANO_JOB_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "jobs.batch.volcano.sh"},
    "spec": {
        "group": "batch.volcano.sh",
        "scope": "Namespaced",
        "names": {"kind": "Job", "plural": "jobs", "singular": "job", "listKind": "JobList"},
        "versions": [
            {
                "name": "v1alpha1",
                "served": True,
                "storage": True,
                "subresources": {"status": {}},
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "x-kubernetes-preserve-unknown-fields": True,
                    }
                },
            }
        ],
    },
}
#: Volcano's controller's account, as Volcano's install makes it (R.VOLCANO)
VOLCANO_NS, VOLCANO_ACCOUNT = "volcano-system", "volcano-controllers"


# -- the stage: a control plane with deploy/ and the fixtures ----------------------------------


@dataclass
class Stage:
    cp: ControlPlane
    uids: dict[str, str]  # the fixtures' Workflows' uids by name
    credentials: dict[R.Identity, Path] = field(default_factory=dict)

    def subst(self, obj: Any) -> Any:
        """``obj`` with each ``{uid:<workflow>}`` placeholder replaced by that Workflow's uid."""
        text = json.dumps(obj)
        for name, uid in self.uids.items():
            text = text.replace(f"{{uid:{name}}}", uid)
        return json.loads(text)

    def kubeconfig(self, who: R.Identity) -> Path:
        """A kubeconfig that authenticates as ``who`` with its own credentials (made once)."""
        if who not in self.credentials:
            self.credentials[who] = _credential(self.cp, who)
        return self.credentials[who]


def install(cp: ControlPlane, bundle: Path = REPO / "deploy") -> Stage:
    """What an administrator sets up before the cases: Argo's CRDs and RBAC, Kyverno's policy
    CRDs, Volcano's Job kind and its controller's account, ``bundle`` (``kubectl apply -k``),
    then the FIXTURES."""
    argo.install(cp, REPO)
    kyverno.install_crds(cp)
    cp.apply([VOLCANO_JOB_CRD])
    cp.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s")
    cp.kubectl("create", "namespace", VOLCANO_NS)
    cp.kubectl("create", "serviceaccount", VOLCANO_ACCOUNT, "-n", VOLCANO_NS)
    cp.kubectl("apply", "-k", str(bundle))
    _wait_for_policies(cp)
    stage = Stage(cp, {})
    for fx in R.FIXTURES:
        out = json.loads(
            cp.kubectl(
                "create", "-n", NS, "-f", "-", "-o", "json", stdin=json.dumps(stage.subst(fx))
            ).stdout
        )
        if out["kind"] == "Workflow":
            stage.uids[out["metadata"]["name"]] = out["metadata"]["uid"]
    return stage


def _wait_for_policies(cp: ControlPlane) -> None:
    """Until the API server's admission enforces the stored policies (its informers, the
    policies' and their parameters', lag the apply by a moment): tried without storing, a
    Workflow that names its own service account is refused by burst-workflows, and one as
    ``burst submit`` sends it is admitted (a binding's missing parameter would refuse it)."""
    stored = {p["metadata"]["name"] for p in cp.get_json("validatingadmissionpolicies")["items"]}
    if R.WF not in stored:
        return
    submitter = cp.kubeconfig(R.SUBMITTER.user, ("burst:submitters",), name="policy-probe")

    def dry_run(body: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        return cp.kubectl("create", "--dry-run=server", "-n", NS, "-f", "-",
                          stdin=json.dumps(body), kubeconfig=submitter, check=False)  # fmt: skip

    def in_force() -> bool:
        refused = dry_run(R.submitted_workflow(serviceAccountName="burst-run"))
        return f"'{R.WF}'" in refused.stderr and dry_run(R.submitted_workflow()).returncode == 0

    cp.wait_for(in_force, "deploy/admission's policies in force", 60)


def _pod_run(pod: str) -> str:
    """The run a step pod's name belongs to (Argo: <workflow>-<template>-<hash>)."""
    return R.RUN if pod.startswith(R.RUN + "-") else pod.rsplit("-", 2)[0]


def _credential(cp: ControlPlane, who: R.Identity) -> Path:
    stem = "case-" + re.sub(r"[^a-z0-9]+", "-", f"{who.user}-{who.pod}".lower()).strip("-")
    if who.user.startswith("system:serviceaccount:"):
        _, _, ns, account = who.user.split(":")
        args = ["create", "token", account, "-n", ns, "--duration=2h"]
        if who.pod:
            # the step's pod, as Argo's controller creates it (an administrator here: its
            # account is the point, not who made it), and a token bound to it
            pod = R.argo_pod(account, run=_pod_run(who.pod))
            pod["metadata"] = {"name": who.pod, "labels": pod["metadata"]["labels"]}
            if cp.kubectl("get", "pod", who.pod, "-n", ns, check=False).returncode != 0:
                cp.kubectl("create", "-n", ns, "-f", "-", stdin=json.dumps(pod))
            args += ["--bound-object-kind=Pod", f"--bound-object-name={who.pod}"]
        path = cp.token_kubeconfig(stem, cp.kubectl(*args).stdout.strip())
    else:  # a person: the groups an authenticator maps them to (it adds system:authenticated)
        path = cp.kubeconfig(
            who.user, [g for g in who.groups if g != "system:authenticated"], name=stem
        )
    seen = json.loads(cp.kubectl("auth", "whoami", "-o", "json", kubeconfig=path).stdout)["status"][
        "userInfo"
    ]
    got = (
        seen["username"],
        sorted(seen.get("groups") or []),
        (seen.get("extra") or {}).get(R.POD_NAME_EXTRA, []),
    )
    assert got == (who.user, sorted(who.groups), [who.pod] if who.pod else []), (
        f"{who.handle}: the API server sees {seen}, the case means {who}"
    )
    return path


@pytest.fixture(scope="module")
def stage(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stage]:
    binaries = engines.binaries(["kubernetes", "etcd"])
    with ControlPlane(tmp_path_factory.mktemp("identities"), binaries) as cp:
        yield install(cp)


# -- deciding a case -----------------------------------------------------------------------------


def refused_by(message: str) -> str:
    """The layer a refusal came from: the ValidatingAdmissionPolicy it names, or RBAC."""
    m = re.search(r"ValidatingAdmissionPolicy '([^']+)'", message)
    if m:
        return m.group(1)
    if re.search(r'User "[^"]+" cannot [a-z]+ resource', message):
        return RBAC
    return f"neither RBAC nor a policy: {message}"


def can_i(cp: ControlPlane, case: R.CanI) -> tuple[bool, str]:
    sub = [f"--subresource={case.subresource}"] if case.subresource else []
    r = cp.kubectl(
        "auth",
        "can-i",
        case.verb,
        case.resource,
        *sub,
        "-n",
        NS,
        *case.who.kubectl_args(),
        check=False,
    )
    answer = r.stdout.strip()
    # a resource the server does not serve answers "no" (with a warning): never a refusal
    assert answer in ("yes", "no") and "doesn't have a resource type" not in r.stderr, r.stderr
    return answer == "yes", r.stderr.strip()


def _prepare(stage: Stage, case: R.Admit) -> None:
    """Each case stands alone (``pytest -k``): a patch's object, when an earlier create case
    makes it, is created first by an administrator; a create's fixed name is freed."""
    cp = stage.cp
    fixtures = {fx["metadata"].get("name") for fx in R.FIXTURES}
    if case.body is not None:
        name = case.body["metadata"].get("name")
        if name and name not in fixtures:
            cp.kubectl("delete", "-n", NS, "-f", "-", "--ignore-not-found", "--wait=false",
                       stdin=json.dumps(stage.subst(case.body)))  # fmt: skip
        return
    if cp.kubectl("get", case.resource, case.name, "-n", NS, check=False).returncode == 0:
        return
    makers = [
        c for c in R.ADMIT if c.body is not None and c.body["metadata"].get("name") == case.name
    ]
    assert makers, f"no fixture or create case makes {case.resource} {case.name}"
    cp.kubectl("create", "-n", NS, "-f", "-", stdin=json.dumps(stage.subst(makers[0].body)))


def admit(stage: Stage, case: R.Admit) -> tuple[bool, str]:
    """Send the case's request with its identity's own credentials: (allowed, the refusal)."""
    _prepare(stage, case)
    kubeconfig = stage.kubeconfig(case.who)
    if case.body is not None:
        r = stage.cp.kubectl("create", "-n", NS, "-f", "-", "-o", "name", kubeconfig=kubeconfig,
                             stdin=json.dumps(stage.subst(case.body)), check=False)  # fmt: skip
        return r.returncode == 0, r.stderr.strip()
    assert case.patch is not None
    return merge_patch(stage.cp, kubeconfig, case.resource, case.name, case.patch)


def merge_patch(
    cp: ControlPlane, kubeconfig: Path, resource: str, name: str, patch: Any
) -> tuple[bool, str]:
    """One PATCH request, as Argo's executor and server send theirs (``kubectl patch`` GETs
    the object first, which burst-executor may not), with the kubeconfig's credentials."""
    stored = cp.get_json(resource, name, "-n", NS)  # where it is served, as the administrator
    plural, _, group = resource.partition(".")
    path = f"/{'apis' if group else 'api'}/{stored['apiVersion']}/namespaces/{NS}/{plural}/{name}"
    user = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]
    tls = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    headers = {"Content-Type": "application/merge-patch+json", "Accept": "application/json"}
    if "token" in user:
        headers["Authorization"] = f"Bearer {user['token']}"
    else:
        tls.load_cert_chain(user["client-certificate"], user["client-key"])
    conn = http.client.HTTPSConnection("127.0.0.1", cp.api_port, context=tls, timeout=60)
    try:
        # Strict, as kubectl sends its requests: a field the kind does not have is an error
        conn.request(
            "PATCH", f"{path}?fieldValidation=Strict", body=json.dumps(patch), headers=headers
        )
        resp = conn.getresponse()
        text = resp.read().decode(errors="replace")
    finally:
        conn.close()
    if resp.status < 300:
        return True, ""
    try:
        message = json.loads(text)["message"]
    except (ValueError, KeyError):
        message = text
    return False, f"{resp.status} {message}"


def expect(case: R.Admit, allowed: bool, message: str) -> None:
    layer = case.policy or RBAC
    if case.allowed:
        assert allowed, (
            f"{case.who.handle}: {case.what}: refused by {refused_by(message)}: {message}"
        )
    else:
        assert not allowed, f"{case.who.handle}: {case.what}: allowed, {layer} should refuse it"
        assert refused_by(message) == layer, (
            f"refused by {refused_by(message)}, not {layer}: {message}"
        )


# -- the case lists ------------------------------------------------------------------------------


def _can_i_id(c: R.CanI) -> str:
    what = c.resource + (f"/{c.subresource}" if c.subresource else "")
    return f"{c.who.handle} {'can' if c.allowed else 'cannot'} {c.verb} {what}"


@pytest.mark.parametrize("case", R.CAN_I, ids=_can_i_id)
def test_rbac_grants_each_identity_what_it_does_and_no_more(stage: Stage, case: R.CanI) -> None:
    allowed, err = can_i(stage.cp, case)
    assert allowed == case.allowed, (
        f"kubectl auth can-i {case.verb} {case.resource} as {case.who.handle}: {'yes' if allowed else 'no'} {err}"
    )


@pytest.mark.parametrize("case", R.ADMIT, ids=lambda c: f"{c.who.handle}: {c.what}")
def test_admission_decides_who_runs_as_whom(stage: Stage, case: R.Admit) -> None:
    expect(case, *admit(stage, case))


# -- the two refusals, named ------------------------------------------------------------


def test_the_submitter_cannot_run_as_another_service_account(stage: Stage) -> None:
    """Not by impersonating it, not with a token of its own making, not through a pod, and not
    through any field of a Workflow that names the account its pods run as."""
    cp, submitter = stage.cp, stage.kubeconfig(R.SUBMITTER)
    account = f"system:serviceaccount:{NS}:burst-run"
    as_run = cp.kubectl(
        "get", "serviceaccounts", "-n", NS, f"--as={account}", kubeconfig=submitter, check=False
    )
    assert (
        as_run.returncode != 0 and 'cannot impersonate resource "serviceaccounts"' in as_run.stderr
    ), as_run.stderr
    assert can_i(cp, R.CanI(R.SUBMITTER, "impersonate", "serviceaccounts", False)) == (False, "")
    token = cp.kubectl("create", "token", "burst-run", "-n", NS, kubeconfig=submitter, check=False)
    assert token.returncode != 0 and refused_by(token.stderr) == RBAC, token.stderr
    pod = R.Admit(
        R.SUBMITTER, "creates a pod that runs as burst-run", False, body=R.argo_pod("burst-run")
    )
    expect(pod, *admit(stage, pod))
    through_workflow = [
        c for c in R.ADMIT
        if c.who == R.SUBMITTER and not c.allowed and "burst-run" in json.dumps(c.body or c.patch)
    ]  # fmt: skip
    assert len(through_workflow) >= 8, [c.what for c in through_workflow]
    for case in through_workflow:
        expect(case, *admit(stage, case))


def test_a_runs_code_cannot_patch_another_workflows_results(stage: Stage) -> None:
    """The run's train pod (its user code, its own account) and its step pods (burst-run) report
    their own node's outputs; another run's WorkflowTaskResult, which Argo's controller reads
    into that run's outputs, stays as it was."""
    cp = stage.cp
    before = cp.get_json("workflowtaskresults.argoproj.io", R.OTHER_NODE, "-n", NS)
    outputs = {"outputs": {"parameters": [{"name": "infra", "value": '{"endpoint": "evil"}'}]}}
    cases = [
        *(
            R.Admit(who, f"{who.handle} patches another run's result", False, R.TR,
                    resource="workflowtaskresults.argoproj.io", name=R.OTHER_NODE, patch=p)
            for who in (R.TRAIN, R.run_step("provision"), R.UNBOUND_TRAIN)
            for p in (outputs, {"metadata": {"labels": {"workflows.argoproj.io/report-outputs-completed": "true"}}})
        ),
        R.Admit(R.TRAIN, "creates a result under another run's label", False, R.TR,
                body=R.task_result(R.TRAIN_NODE + "1", R.OTHER)),
        R.Admit(R.TRAIN, "patches another run's Workflow", False,
                resource="workflows.argoproj.io", name=R.OTHER, patch={"status": {"outputs": outputs["outputs"]}}),
    ]  # fmt: skip
    for case in cases:
        expect(case, *admit(stage, case))
    after = cp.get_json("workflowtaskresults.argoproj.io", R.OTHER_NODE, "-n", NS)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert "outputs" not in after
    missing = cp.kubectl(
        "get", "workflowtaskresults.argoproj.io", R.TRAIN_NODE + "1", "-n", NS, check=False
    )
    assert missing.returncode != 0


def test_a_pod_bound_token_is_the_identity_the_policies_read(stage: Stage) -> None:
    """The same account, its token bound to a step pod or to none: the policies tell the run's
    own step from anyone else holding the account."""
    bound = R.run_step("run-service-account")
    unbound = R.Identity("burst-run, token bound to no pod", bound.user, bound.groups)
    for case in (
        R.Admit(bound, "applies its run's account", True, body=R.run_account(f"burst-{R.RUN}-w")),
        R.Admit(
            unbound,
            "applies the run's account",
            False,
            R.RA,
            body=R.run_account(f"burst-{R.RUN}-v"),
        ),
    ):
        expect(case, *admit(stage, case))


def test_the_policies_type_check_clean(stage: Stage) -> None:
    """The API server type-checks each policy's CEL against the kinds it matches: a warning
    is an expression that reads a field those kinds do not have."""
    policies = {
        p["metadata"]["name"]: p for p in stage.cp.get_json("validatingadmissionpolicies")["items"]
    }
    assert {R.WF, R.TR, R.PI, R.RA, R.RB, R.RG} <= set(policies)

    def checked() -> bool:
        fresh = stage.cp.get_json("validatingadmissionpolicies")["items"]
        return all(
            (p.get("status") or {}).get("observedGeneration") == p["metadata"]["generation"]
            for p in fresh
        )

    with contextlib.suppress(TierError):  # reported below as what status holds
        stage.cp.wait_for(checked, "the policies' type checking", 60)
    warnings = {
        p["metadata"]["name"]: ((p.get("status") or {}).get("typeChecking") or {}).get(
            "expressionWarnings"
        )
        for p in stage.cp.get_json("validatingadmissionpolicies")["items"]
    }
    assert not any(warnings.values()), warnings
