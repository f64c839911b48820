"""The provision step's Kueue reader and refusal against the real API server and Kueue's CRDs.

On the engines tier (deploy/ and deploy/kueue applied as a site applies them), with the token
the API server issues to the account the provision pod runs as (``burst-run``) and the tier's
CA, as a pod has them mounted: the reader gets the team's LocalQueue, ClusterQueue and
ResourceFlavors through deploy/rbac.yaml's grants alone; a run the shipped flavors cover
passes, one they do not (b200 on gcp) is refused in one line, and is covered once a flavor and
queue `burst kueue` made for it are applied. An account without those grants is an
infrastructure error (exit 4), not a refusal. And through Argo: the quickstart submitted for
a team whose ClusterQueue holds no flavor of its GPU type is refused by its provision pod
(exit 3, the one line in its log) and rents no node."""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from runs import cluster_spec, pod_nodes, submit, wait_finished

from burst.admission import kueue_reader
from burst.admission.kueue_objects import NAMESPACE, kueue_objects
from burst.admission.kueue_reader import (
    FlavorRefused,
    InCluster,
    KueueAbsent,
    KueueReader,
    covered_candidates,
)
from burst.documents.plan import Candidate
from burst.errors import EXIT_INFRA, EXIT_REFUSED, InfraError
from burst.plan.catalog import load_catalog
from burst.spec import BurstJob, load_spec
from burst.storage.loopback import LoopbackS3
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.tier import REPO, Tier

pytestmark = pytest.mark.cluster

TEAM = "ml-research"
AWS = Candidate(region="ap-southeast-3", provider="aws", capacity="spot", gpu_type="h200")
GCP = Candidate(region="asia-southeast1", provider="gcp", capacity="spot", gpu_type="b200")


def _pod_account(cp: ControlPlane, tmp: Path, account: str) -> InCluster:
    """What the kubelet mounts into a pod of ``account``: its token, the CA, the namespace."""
    sa = tmp / account
    sa.mkdir()
    (sa / "token").write_text(cp.create_token(NAMESPACE, account, duration="10m"))
    (sa / "namespace").write_text(NAMESPACE)
    (sa / "ca.crt").write_bytes((cp.pki / "ca.crt").read_bytes())
    env = {"KUBERNETES_SERVICE_HOST": "127.0.0.1", "KUBERNETES_SERVICE_PORT": str(cp.api_port)}
    return InCluster.from_pod(env, sa)


@pytest.fixture
def job() -> BurstJob:
    spec = load_spec(REPO / "examples" / "quickstart.yaml")
    return spec.model_copy(update={"team": TEAM})


@contextlib.contextmanager
def _gcp_team(cp: ControlPlane, team: str) -> Iterator[None]:
    """A team of its own (no cohort) whose ClusterQueue and flavors `burst kueue --provider
    gcp` made; the flavors renamed ``cov-...`` so that no other test's are touched."""
    objects = kueue_objects(load_catalog(use_env=False), {team: 1}, ["gcp"])
    mine: list[dict[str, Any]] = []
    for o in objects:
        if o["kind"] == "ResourceFlavor":
            mine.append(
                {**o, "metadata": {**o["metadata"], "name": "cov-" + o["metadata"]["name"]}}
            )
        elif o["kind"] == "ClusterQueue":
            o["spec"].pop("cohortName")
            o["spec"]["preemption"] = {"withinClusterQueue": "LowerPriority"}
            for group in o["spec"]["resourceGroups"]:
                for f in group["flavors"]:
                    f["name"] = "cov-" + f["name"]
                    for r in f["resources"]:
                        r.pop("borrowingLimit", None)
            mine.append(o)
        elif o["kind"] == "LocalQueue":
            mine.append(o)
    cp.apply(mine)
    try:
        yield
    finally:
        for o in reversed(mine):
            ns = ["-n", o["metadata"]["namespace"]] if "namespace" in o["metadata"] else []
            cp.kubectl(
                "delete", o["kind"].lower() + ".kueue.x-k8s.io", o["metadata"]["name"], *ns,
                "--wait=false", check=False,
            )  # fmt: skip


def test_the_reader_and_the_refusal_against_the_real_api_server(
    cp: ControlPlane, tmp_path: Path, job: BurstJob
) -> None:
    api = _pod_account(cp, tmp_path, "burst-run")
    queue = KueueReader(api).team_queue(TEAM)
    assert queue.local_queue == f"burst-{TEAM}"
    assert queue.cluster_queue["metadata"]["name"] == TEAM
    assert len(queue.flavors) >= 16  # deploy/kueue's, and what other tests applied
    assert covered_candidates(job, [GCP, AWS], queue) == [AWS]
    with pytest.raises(FlavorRefused) as err:
        covered_candidates(job, [GCP], queue)
    assert err.value.exit_code == EXIT_REFUSED
    line = err.value.one_line()
    assert "b200 in gcp/asia-southeast1 (spot)" in line and f"ClusterQueue {TEAM}" in line

    team = "cov-gcp"
    gcp_job = job.model_copy(update={"team": team})
    with _gcp_team(cp, team):
        gcp_queue = KueueReader(api).team_queue(team)
        assert covered_candidates(gcp_job, [GCP], gcp_queue) == [GCP]
    with pytest.raises(FlavorRefused) as err:  # a team with no LocalQueue
        KueueReader(api).team_queue("no-such-team")
    assert "no Kueue LocalQueue burst-no-such-team" in err.value.one_line()


def test_an_account_without_the_grants_is_an_infrastructure_error(
    cp: ControlPlane, tmp_path: Path
) -> None:
    api = _pod_account(cp, tmp_path, "burst-reaper")
    with pytest.raises(InfraError) as err:
        KueueReader(api).team_queue(TEAM)
    assert err.value.exit_code == EXIT_INFRA
    assert "403" in err.value.one_line()


def test_a_submitted_run_no_flavor_covers_rents_nothing(
    tier: Tier, submitter: Path, store: LoopbackS3, tmp_path: Path
) -> None:
    """The quickstart (h100 on aws) for a team whose queue holds gcp's flavors only."""
    team = "cov-nocover"
    quota = ["configmap", "burst-gpu-quota", "-n", NAMESPACE, "--type=json"]
    tier.cp.kubectl("patch", *quota, "-p", f'[{{"op":"add","path":"/data/{team}","value":"1"}}]')
    try:
        with _gcp_team(tier.cp, team):
            store.create_bucket("coverage-tier")
            spec = cluster_spec(tmp_path, "coverage-tier")
            doc = yaml.safe_load(spec.read_text())
            doc["team"] = team  # what provision reads, and `burst submit` passes as `team`
            spec.write_text(yaml.safe_dump(doc, sort_keys=False))
            name = submit(tier, submitter, spec, tmp_path, team=team)
            wf = wait_finished(tier, name, timeout=420)
    finally:
        tier.cp.kubectl("patch", *quota, "-p", f'[{{"op":"remove","path":"/data/{team}"}}]')
    assert wf["status"]["phase"] == "Failed", tier.describe(name)
    (provision,) = pod_nodes(wf, "provision")
    message = provision.get("message", "")  # Argo's: the main container's exit code
    assert provision["phase"] == "Failed", tier.describe(name)
    assert re.search(r"exit code 3|'main': 3", message), (message, tier.describe(name))
    log = tier.container_logs(f"{name}-provision")
    lines = [ln for ln in log.splitlines() if ln.startswith("burst provision: error:")]
    assert len(lines) == 1, log[-3000:]
    assert "no Kueue flavor covers h100 in aws/" in lines[0], lines
    assert f"ClusterQueue {team}" in lines[0] and "nor any of the other" in lines[0], lines
    assert "Traceback" not in log
    assert not pod_nodes(wf, "train")
    rented = [n for n, labels in tier.bound_nodes(name).items() if labels.get("burst/run-id")]
    assert rented == [], rented


def test_a_kueue_api_the_api_server_does_not_serve_is_kueue_absent(
    cp: ControlPlane, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kueue is optional (docs/cluster-setup.md): the real API server's 404 for an API group it
    does not serve is told from its 404 for an object that does not exist (a refusal, above):
    the first is KueueAbsent (the ledger admits alone), never a refusal."""
    group = "kueue-absent.burst.example"
    # deploy/rbac.yaml's grant, for the group that is not served (authorization comes first:
    # without a grant the API server answers 403 whether it serves the group or not)
    grant: list[dict[str, Any]] = [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "absent-kueue", "namespace": NAMESPACE},
            "rules": [{"apiGroups": [group], "resources": ["localqueues"], "verbs": ["get"]}],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "absent-kueue", "namespace": NAMESPACE},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "absent-kueue",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "burst-run", "namespace": NAMESPACE}],
        },
    ]
    cp.apply(grant)
    try:
        api = _pod_account(cp, tmp_path, "burst-run")
        monkeypatch.setattr(kueue_reader, "API", f"{group}/v1beta2")
        end = time.monotonic() + 30
        while True:  # (the API server's authorizer sees a new grant within moments)
            try:
                KueueReader(api).team_queue(TEAM)
            except KueueAbsent as exc:
                assert "does not serve" in exc.one_line()
                break
            except InfraError as exc:
                assert " 403 " in exc.one_line() and time.monotonic() < end, exc.one_line()
                time.sleep(0.5)
            else:
                pytest.fail("a group the API server does not serve was read")
    finally:
        for o in grant:
            cp.kubectl(
                "delete", o["kind"].lower(), o["metadata"]["name"], "-n", NAMESPACE, check=False
            )
