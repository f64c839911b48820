"""docs/cluster-setup.md followed on the engines tier, command by command.

Every command of the page's command blocks (its indented code blocks, continuation lines
joined) is one case of ``test_the_page_s_command``: run on the tier as written (``kubectl``
with the tier's admin kubeconfig, ``deploy/...`` paths relative to the repository root), or
skipped with one reason of ``SKIPS``, a closed list. A command that no rule of ``RULES``
names fails its case, so a command added to the page cannot go unchecked. Then the page's
claims the tier can verify: the namespaces it names exist, the group it maps the CI to is the
one deploy/rbac.yaml binds, the Kueue, Argo and Kubernetes versions it names are the tier's.

What is checked offline (no cluster) is tests/deploy/test_cluster_setup.py.
"""

from __future__ import annotations

import contextlib
import re
import shlex
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devtools import engines
from devtools.cluster import argo
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.tier import REPO, Tier

pytestmark = pytest.mark.cluster

DOC = REPO / "docs" / "cluster-setup.md"

#: Why a command is not run on the tier: the closed list. A rule may only name one of these.
SKIPS: dict[str, str] = {
    "aws": "needs AWS (an account, EKS, IAM, S3): the tier has no cloud",
    "internet": (
        "needs the internet (a release asset on GitHub): the tier installs the same Argo "
        "version's manifests (manifests/cluster-install, which the release's install.yaml is "
        "built from) from Argo's Go module, devtools/cluster/argo.py; its version is checked here"
    ),
    "helm": (
        "needs helm and a chart repository; where the tier has a stand-in it is built from the "
        "project's Go module (Kueue v0.17.0: devtools/cluster/kueue.py; Kyverno: its CRDs only, "
        "Tier.install_kyverno_crds; Volcano: none)"
    ),
    "stack": (
        "needs a stack the tier does not run (Knative Serving, KServe's controller, "
        "Volcano's controller, Argo's server)"
    ),
    "no-crds": (
        "the CRDs it needs are in no module the Go module proxy serves here "
        "(volcano.sh/volcano is not served; volcano.sh/apis holds Go types only, no CRD YAML): "
        "the bundle is rendered here, and validated offline (tests/deploy/test_scheduling.py)"
    ),
}


@dataclass(frozen=True)
class Command:
    step: str  # the page's "## N. ..." heading
    line: int  # 1-based line of the command's first line
    text: str  # continuation lines joined

    @property
    def id(self) -> str:
        return f"L{self.line}-{' '.join(self.text.split()[:3])}"


def commands(text: str) -> list[Command]:
    """Every command of the page's indented code blocks (a block opens after a blank line,
    its lines indented by 4 spaces or more), a trailing backslash joining the next line."""
    out: list[Command] = []
    step = ""
    lines = text.splitlines()
    in_block = False
    pending: list[str] = []
    start = 0
    for i, raw in enumerate(lines):
        if raw.startswith("#"):
            step = raw.lstrip("#").strip()
        indented = raw.startswith("    ") and raw.strip()
        if indented and (in_block or i == 0 or not lines[i - 1].strip()):
            in_block = True
            if not pending:
                start = i + 1
            stripped = raw.strip()
            if stripped.endswith("\\"):
                pending.append(stripped[:-1].strip())
                continue
            pending.append(stripped)
            out.append(Command(step, start, " ".join(pending)))
            pending = []
        elif raw.strip():
            in_block = False
    assert not pending, f"a command ends in a backslash: {pending}"
    return out


COMMANDS = commands(DOC.read_text(encoding="utf-8"))


# -- how each command is run ----------------------------------------------------------------


def _kubectl(cp: ControlPlane, argv: list[str], *extra: str) -> str:
    """The page's kubectl command as written, against the tier (admin kubeconfig), with
    `-k DIR` resolved against the repository root."""
    assert argv[0] == "kubectl", argv
    args = list(argv[1:])
    for i, a in enumerate(args[:-1]):
        if a == "-k":
            path = REPO / args[i + 1]
            assert (path / "kustomization.yaml").is_file(), f"the page applies {args[i + 1]}"
            args[i + 1] = str(path)
    return cp.kubectl(*args, *extra).stdout


def run_create_namespace(tier: Tier, argv: list[str]) -> None:
    # Argo's install on the tier ran this same command (devtools/cluster/argo.py install):
    # here it meets the namespace that one made.
    out = tier.cp.kubectl(*argv[1:], check=False)
    assert out.returncode == 0 or "AlreadyExists" in out.stderr, out.stderr
    tier.cp.kubectl("get", "namespace", argv[-1])


def run_apply(tier: Tier, argv: list[str]) -> None:
    _kubectl(tier.cp, argv)


def run_apply_dry_run(tier: Tier, argv: list[str]) -> None:
    # The NVIDIA device plugin's DaemonSet goes to the GPU nodes the tier's cloud joins (label
    # burst/run-id): stored for real, the stand-in kubelet would be asked to run its pods
    # there beside other tests' runs. Server-side dry run: admission and schemas, nothing kept.
    _kubectl(tier.cp, argv, "--dry-run=server")


KSERVE = "v0.16.0"  # the oldest KServe deploy/inference names (deploymentMode "Knative")


def _wait_established(cp: ControlPlane, name: str) -> None:
    # not `kubectl wait`: a CRD just created has no status.conditions yet, and kubectl wait
    # fails on that instead of waiting
    def established() -> bool:
        conds = (cp.get_json("crd", name).get("status") or {}).get("conditions") or []
        return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

    cp.wait_for(established, f"CRD {name} Established", timeout=60)


def run_apply_inference(tier: Tier, argv: list[str]) -> None:
    """deploy/inference with KServe's InferenceService CRD from KServe's module (the oldest
    release the bundle names): the services are stored and schema-checked, nothing serves
    them (no KServe controller, no Knative)."""
    try:
        src = engines.module_source(f"github.com/kserve/kserve@{KSERVE}")
    except engines.BuildFailed as exc:
        pytest.skip(f"{SKIPS['no-crds']}: {exc}")
    crd = src / "config" / "crd" / "full" / "serving.kserve.io_inferenceservices.yaml"
    tier.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crd))
    _wait_established(tier.cp, "inferenceservices.serving.kserve.io")
    _kubectl(tier.cp, argv)
    names = {
        o["metadata"]["name"]
        for o in yaml.safe_load_all(tier.cp.kubectl("kustomize", str(REPO / argv[-1])).stdout)
        if o and o["kind"] == "InferenceService"
    }
    stored = tier.cp.get_json("inferenceservices.serving.kserve.io", "-n", "burst-inference")
    assert names and names <= {o["metadata"]["name"] for o in stored["items"]}


def run_apply_volcano(tier: Tier, argv: list[str]) -> None:
    rendered = [
        o
        for o in yaml.safe_load_all(tier.cp.kubectl("kustomize", str(REPO / argv[-1])).stdout)
        if o
    ]
    assert rendered and {o["kind"] for o in rendered} == {"Queue"}
    for ref in ("volcano.sh/apis@v1.12.1",):
        try:
            src = engines.module_source(ref)
        except engines.BuildFailed:
            continue
        crds = [
            p
            for p in src.rglob("*.yaml")
            if "CustomResourceDefinition" in p.read_text(errors="replace")
            and "queues.scheduling.volcano.sh" in p.read_text(errors="replace")
        ]
        if crds:  # a module that carries it: apply it, then the bundle
            for c in crds:
                tier.cp.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(c))
            _wait_established(tier.cp, "queues.scheduling.volcano.sh")
            _kubectl(tier.cp, argv)
            return
    pytest.skip(SKIPS["no-crds"])


@contextlib.contextmanager
def stored_install_deployment(tier: Tier, name: str) -> Iterator[None]:
    """The tier runs Argo's controller as a process and none of Argo's Deployments: this one
    of the same version's install (manifests/cluster-install, what the release's install.yaml
    is built from) is stored for the duration with no replicas, so the page's command can be
    applied to it as written and its result read."""
    src = engines.module_source(f"github.com/argoproj/argo-workflows/v4@{engines.ARGO}")
    text = tier.cp.kubectl("kustomize", str(src / "manifests" / "cluster-install")).stdout
    (dep,) = [
        d
        for d in yaml.safe_load_all(text)
        if d and d["kind"] == "Deployment" and d["metadata"]["name"] == name
    ]
    dep["metadata"]["namespace"] = argo.NAMESPACE
    dep["spec"]["replicas"] = 0  # stored, never run
    tier.cp.apply([dep])
    try:
        yield
    finally:
        tier.cp.kubectl("delete", "deployment", name, "-n", argo.NAMESPACE, check=False)


def run_patch_argo_server(tier: Tier, argv: list[str]) -> None:
    """The page's patch on the argo-server Deployment: the server container's arguments."""
    with stored_install_deployment(tier, "argo-server"):
        _kubectl(tier.cp, argv)
        got = tier.cp.get_json("deployment", "argo-server", "-n", argo.NAMESPACE)
        (first, *_) = got["spec"]["template"]["spec"]["containers"]
        assert first["name"] == "argo-server"  # the patch's containers/0 is the server
        assert first["args"] == ["server", "--auth-mode=client"]


def run_controller_env(tier: Tier, argv: list[str]) -> None:
    """The page's `set env` on the workflow-controller Deployment gives the environment the
    tier's own controller runs with (devtools/cluster/argo.py)."""
    with stored_install_deployment(tier, "workflow-controller"):
        _kubectl(tier.cp, argv)
        got = tier.cp.get_json("deployment", "workflow-controller", "-n", argo.NAMESPACE)
        (ctr,) = got["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in ctr.get("env") or []}
        assert env.get(argo.CAPTURE_FINALIZER) == "true", env
        pid = tier.cp.processes["workflow-controller"].proc.pid
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        assert f"{argo.CAPTURE_FINALIZER}=true".encode() in environ


def check_argo_install_url(tier: Tier, argv: list[str]) -> None:
    """Not run (the internet); the page's version is the one the tier installs."""
    (url,) = [a for a in argv if a.startswith("https://")]
    m = re.fullmatch(
        r"https://github\.com/argoproj/argo-workflows/releases/download/(v[\d.]+)/install\.yaml",
        url,
    )
    assert m, url
    assert m.group(1) == engines.ARGO, (m.group(1), engines.ARGO)
    assert argv[1:4] == ["apply", "-n", argo.NAMESPACE]


Runner = Callable[[Tier, list[str]], None]


@dataclass(frozen=True)
class Rule:
    pattern: str  # re.fullmatch against the command
    run: Runner | None = None  # run on the tier ...
    skip: str | None = None  # ... or skipped, for one reason of SKIPS
    check: Runner | None = None  # what a skipped command is checked for before the skip


RULES: tuple[Rule, ...] = (
    Rule(r"eksctl .*", skip="aws"),
    Rule(r"aws .*", skip="aws"),
    Rule(r"kubectl create namespace argo", run=run_create_namespace),
    Rule(
        r"kubectl apply -n argo -f https://\S+/install\.yaml",
        skip="internet",
        check=check_argo_install_url,
    ),
    Rule(r"kubectl -n argo patch deployment argo-server .*", run=run_patch_argo_server),
    Rule(
        r"kubectl -n argo set env deployment/workflow-controller "
        r"ARGO_POD_STATUS_CAPTURE_FINALIZER=true",
        run=run_controller_env,
    ),
    Rule(r"kubectl apply -k deploy/(controller|kueue|)/?", run=run_apply),
    Rule(r"kubectl apply -k deploy/device-plugin", run=run_apply_dry_run),
    Rule(r"kubectl apply -k deploy/volcano", run=run_apply_volcano),
    Rule(r"kubectl apply -k deploy/inference", run=run_apply_inference),
    Rule(r"helm install .*", skip="helm"),
    Rule(r"kubectl patch configmap/config-features -n knative-serving .*", skip="stack"),
    # step 9: the Argo server (none on the tier) and the state bucket (AWS); the quickstart is
    # run on the tier through `argo submit` as the submitter (tests/cluster/test_quickstart.py)
    Rule(r"export ARGO_SERVER=\S+ ARGO_NAMESPACE=burst", skip="stack"),
    Rule(r'export ARGO_TOKEN=".*aws eks get-token.*"', skip="aws"),
    Rule(r'export BURST_TF_STATE_BUCKET="\$STATE_BUCKET" .*', skip="aws"),
    Rule(r"burst submit examples/\S+", skip="stack"),
    Rule(r'burst status .*--token-command "aws .*', skip="aws"),
)


def rule_for(cmd: Command) -> Rule | None:
    found = [r for r in RULES if re.fullmatch(r.pattern, cmd.text)]
    assert len(found) <= 1, f"{cmd.text}: more than one rule: {[r.pattern for r in found]}"
    return found[0] if found else None


def test_the_rules_are_well_formed() -> None:
    assert len(COMMANDS) >= 20  # the parser found the page's blocks
    for r in RULES:
        assert (r.run is None) != (r.skip is None), r.pattern
        assert r.skip is None or r.skip in SKIPS, r.skip
    # every rule is used: a command removed from the page takes its rule along
    unused = [
        r.pattern for r in RULES if not any(re.fullmatch(r.pattern, c.text) for c in COMMANDS)
    ]
    assert not unused, unused


@pytest.mark.parametrize("cmd", COMMANDS, ids=[c.id for c in COMMANDS])
def test_the_page_s_command(tier: Tier, cmd: Command) -> None:
    rule = rule_for(cmd)
    assert rule is not None, (
        f"docs/cluster-setup.md line {cmd.line} ({cmd.step}): {cmd.text!r} is neither run on "
        "the engines tier nor skipped for a reason of SKIPS: add a rule to RULES"
    )
    argv = shlex.split(cmd.text)
    if rule.skip:
        if rule.check:
            rule.check(tier, argv)
        pytest.skip(f"{cmd.step}: {SKIPS[rule.skip]}")
    assert rule.run is not None
    rule.run(tier, argv)


# -- the page's claims the tier can verify --------------------------------------------------


def _text() -> str:
    return DOC.read_text(encoding="utf-8")


def _namespaces_named() -> set[str]:
    text = _text()
    (para,) = [p for p in text.split("\n\n") if p.startswith("Namespaces:")]
    names = {n for n in re.findall(r"`([^`]+)`", para) if re.fullmatch(r"[a-z][a-z0-9-]*", n)}
    names |= set(re.findall(r"namespace `([a-z][a-z0-9-]*)`", text))
    return names


def test_the_namespaces_the_page_names_exist_after_its_steps(cp: ControlPlane) -> None:
    # after the commands above (deploy/inference makes burst-inference)
    names = _namespaces_named()
    assert {"argo", "burst", "kube-system", "burst-inference"} <= names, names
    for n in sorted(names):
        cp.kubectl("get", "namespace", n)
    runs = yaml.safe_load((REPO / "deploy" / "kustomization.yaml").read_text())["namespace"]
    assert f"ARGO_NAMESPACE={runs}" in _text()


def test_the_ci_group_is_the_submitters_binding(cp: ControlPlane, tmp_path: Path) -> None:
    text = _text()
    named = set(re.findall(r"--kubernetes-groups (\S+)", text))
    assert named == {"burst:submitters"}
    assert all(f"(`{g}`)" in text for g in named)  # step 8's prose names the same
    bound = {
        (s["name"], b["roleRef"]["name"])
        for b in cp.get_json("rolebindings", "-n", "burst")["items"]
        for s in b.get("subjects") or []
        if s["kind"] == "Group"
    }
    for g in named:
        roles = {r for name, r in bound if name == g}
        assert roles, f"{g} is bound to nothing in burst: {bound}"
        kc = cp.kubeconfig("doc-ci-role", (g,))
        for verb, res in (("create", "workflows.argoproj.io"), ("get", "workflowtemplates")):
            out = cp.kubectl("auth", "can-i", verb, res, "-n", "burst", kubeconfig=kc, check=False)
            assert out.stdout.strip() == "yes", (g, verb, res, out.stdout, out.stderr)


def test_the_kueue_the_page_names_is_the_tier_s(cp: ControlPlane) -> None:
    text = " ".join(_text().split())
    assert f"Kueue {engines.KUEUE}" in text
    assert "API `kueue.x-k8s.io/v1beta2`" in text
    crd = cp.get_json("crd", "clusterqueues.kueue.x-k8s.io")
    assert "v1beta2" in {v["name"] for v in crd["spec"]["versions"] if v["served"]}
    # at most 16 flavors per ClusterQueue: v0.17.0 writes one LocalQueue status entry per
    # flavor and its schema allows 16. The LocalQueues' status is written (Active) here.
    for cq in cp.get_json("clusterqueues.kueue.x-k8s.io")["items"]:
        flavors = {f["name"] for g in cq["spec"]["resourceGroups"] for f in g.get("flavors") or []}
        assert 0 < len(flavors) <= 16, (cq["metadata"]["name"], len(flavors))
    assert "at most 16 flavors" in text

    def active() -> bool:
        lqs = cp.get_json("localqueues.kueue.x-k8s.io", "-n", "burst")["items"]
        return bool(lqs) and all(
            any(
                c["type"] == "Active" and c["status"] == "True"
                for c in (q.get("status") or {}).get("conditions") or []
            )
            for q in lqs
        )

    cp.wait_for(active, "every LocalQueue of deploy/kueue Active", timeout=120)


def test_the_argo_and_kubernetes_the_page_names_are_the_tier_s(cp: ControlPlane) -> None:
    text = " ".join(_text().split())
    # the controller configuration of step 4 is the controller's: reference mode Secure
    cm = cp.get_json("configmap", "workflow-controller-configmap", "-n", argo.NAMESPACE)
    assert yaml.safe_load(cm["data"]["workflowRestrictions"]) == {"templateReferencing": "Secure"}
    assert "templateReferencing: Secure" in text
    assert f"tested: {engines.ARGO}" in text
    # Kubernetes: deploy/admission's ValidatingAdmissionPolicies (admissionregistration/v1)
    assert "Kubernetes >= 1.30" in text
    out = cp.kubectl("version", "-o", "json").stdout
    server = yaml.safe_load(out)["serverVersion"]["gitVersion"]
    assert server == engines.KUBERNETES and f"tested: {engines.KUBERNETES}" in text, server
    vaps = {
        o["metadata"]["name"]
        for o in cp.get_json("validatingadmissionpolicies.admissionregistration.k8s.io")["items"]
    }
    shipped = {
        o["metadata"]["name"]
        for p in sorted((REPO / "deploy" / "admission").glob("*.yaml"))
        for o in yaml.safe_load_all(p.read_text())
        if o and o["kind"] == "ValidatingAdmissionPolicy"
    }
    assert shipped and shipped <= vaps
