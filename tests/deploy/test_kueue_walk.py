"""What the walk of burst's Kueue artifacts through Kueue's source found
(docs/reference/walk-kueue.md; kubernetes-sigs/kueue ff69552e79ad21652c36caa97038382e55625cf7,
v0.20.0-devel-377). Each test models one rule of Kueue's code on burst's own files, so it needs
no cluster; the ones marked xfail(strict) are surprises that are still open: they fail today
and turn the suite red (XPASS) the day burst fixes them, so the mark must go then."""

from __future__ import annotations

import json
import logging
import re
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.pipelines.gang import volcano_job

REPO = Path(__file__).resolve().parents[2]
KUEUE = REPO / "deploy" / "kueue"
NODEGROUP_OUTPUTS = REPO / "terraform" / "modules" / "aws-gpu-nodegroup" / "outputs.tf"


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((KUEUE / name).read_text()) if d]


STACK_OUTPUTS = REPO / "terraform" / "stacks" / "burst-run" / "outputs.tf"


def _selector(capacity: str, flavor_labels: dict[str, str]) -> dict[str, str]:
    """The node selector a train pod gets on nodes that carry ``flavor_labels`` (the node
    group's ``node_selector`` output, merged by the burst-run stack, passed to the pods as
    ``inputs.parameters.node-selector``), read from the two outputs.tf: which keys it names
    for a candidate of ``capacity`` (spot, on_demand, spot_with_floor)."""
    module = NODEGROUP_OUTPUTS.read_text()
    block = module[module.index('output "node_selector"') :]
    block = block[: block.index("\n}\n")]
    keys = set(re.findall(r'"([a-z0-9./-]+)"\s*=', block))
    floor_drops_capacity = "var.on_demand_floor > 0 ? {}" in block
    if capacity == "spot_with_floor" and floor_drops_capacity:
        keys.discard("burst/capacity")
    stack = STACK_OUTPUTS.read_text()
    stack = stack[stack.index('output "node_selector"') :]
    stack = stack[: stack.index("\n}\n")]
    keys |= set(re.findall(r'"([a-z0-9./-]+)"\s*=\s*var\.region', stack))
    node = {**flavor_labels, "burst/run-id": "r1"}
    return {k: node[k] for k in keys if k in node}


def _flavor_matches(
    flavor_labels: dict[str, str], node_selector: dict[str, str], keys: set[str]
) -> bool:
    """Kueue's flavorassigner.flavorSelector + Match: the pod's nodeSelector, restricted to the
    resource group's LabelKeys (``keys``: every key any flavor of the group names,
    clusterqueue.go updateLabelKeys), must match the flavor's nodeLabels as a node's labels:
    a key the pod selects that this flavor lacks does not match (walk-kueue S7)."""
    return all(flavor_labels.get(k) == v for k, v in node_selector.items() if k in keys)


def test_kueue_admits_a_train_pod_under_the_flavor_of_the_nodes_burst_provisioned() -> None:
    """walk-kueue S1: with a selector of accelerator and burst/run-id only, Kueue took the
    first flavor with quota (spot, ap-southeast-1) whatever region and capacity burst rented,
    and pinned the pod there with that flavor's nodeLabels: a pod that never schedules.
    (The EKS node groups' flavors; every provider's: tests/deploy/test_kueue_providers.py.)"""
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in _docs("flavors.yaml")}
    keys = {k for labels in flavors.values() for k in labels}
    aws = {n: fl for n, fl in flavors.items() if "eks.amazonaws.com/compute-type" not in fl}
    assert aws and len(aws) < len(flavors)  # the hybrid flavors, which name the region too
    for name, labels in aws.items():
        capacity = labels["burst/capacity"]
        selector = _selector(capacity, labels)
        matching = [n for n, fl in flavors.items() if _flavor_matches(fl, selector, keys)]
        assert matching == [name], f"nodes of {name}: Kueue may pick any of {matching}"
        if capacity == "spot":
            # spot with an on-demand floor: the pod may land on either group of the region,
            # so Kueue may pick either flavor of that region (and pins the pod to it)
            floor = _selector("spot_with_floor", labels)
            both = [n for n, fl in flavors.items() if _flavor_matches(fl, floor, keys)]
            assert both == [name, name.replace("-spot", "-ondemand")]


def test_a_key_the_pod_selects_and_a_flavor_lacks_does_not_match() -> None:
    """walk-kueue S7: the model above is Kueue's, not "the flavor's own keys only": a hybrid
    pod (it selects eks.amazonaws.com/compute-type) never matches an EKS node group's flavor,
    and an AWS pod never a hybrid flavor (the regions differ: one region id cannot name
    flavors of two providers). The earlier model, restricted to the flavor's own keys, let a
    hybrid pod whose nodes carried no region (before S9's fix) match every AWS flavor of its
    GPU type and capacity."""
    flavors = {f["metadata"]["name"]: f["spec"]["nodeLabels"] for f in _docs("flavors.yaml")}
    keys = {k for labels in flavors.values() for k in labels}
    aws_pod = {
        "accelerator": "h100",
        "burst/capacity": "spot",
        "burst/run-id": "r1",
        "topology.kubernetes.io/region": "ap-southeast-1",
    }
    hybrid_pod = {
        "accelerator": "h100",
        "burst/capacity": "spot",
        "burst/run-id": "r1",
        "eks.amazonaws.com/compute-type": "hybrid",
        "topology.kubernetes.io/region": "eu-north1",
    }
    assert [n for n, fl in flavors.items() if _flavor_matches(fl, aws_pod, keys)] == [
        "h100-ap-southeast-1-spot"
    ]
    assert [n for n, fl in flavors.items() if _flavor_matches(fl, hybrid_pod, keys)] == [
        "h100-eu-north1-spot"
    ]
    # a hybrid pod whose nodes carried no region (before S9's fix)
    no_region = {k: v for k, v in hybrid_pod.items() if k != "topology.kubernetes.io/region"}
    matching = [n for n, fl in flavors.items() if _flavor_matches(fl, no_region, keys)]
    assert matching and all("eks.amazonaws.com/compute-type" in flavors[n] for n in matching)

    def own_keys_only(fl: dict[str, str], sel: dict[str, str]) -> bool:
        return all(sel[k] == v for k, v in fl.items() if k in sel)

    own = [n for n, fl in flavors.items() if own_keys_only(fl, no_region)]
    assert "h100-ap-southeast-1-spot" in own  # an AWS flavor: the other model's mistake


def _reachable_gpus(team: str) -> dict[str, int]:
    """Kueue's quota rule per flavor for one podset: at most nominalQuota + borrowingLimit of
    the team's ClusterQueue, and never more than the cohort's nominal quota of the flavor."""
    queues = {q["metadata"]["name"]: q for q in _docs("clusterqueues.yaml")}

    def gpu(q: dict[str, Any]) -> dict[str, tuple[int, int | None]]:
        out = {}
        for rg in q["spec"]["resourceGroups"]:
            for f in rg["flavors"]:
                for r in f["resources"]:
                    if r["name"] == "nvidia.com/gpu":
                        out[f["name"]] = (int(r["nominalQuota"]), r.get("borrowingLimit"))
        return out

    cohort: dict[str, int] = {}
    for q in queues.values():
        for f, (nominal, _) in gpu(q).items():
            cohort[f] = cohort.get(f, 0) + nominal
    out = {}
    for f, (nominal, limit) in gpu(queues[team]).items():
        own = nominal + limit if limit is not None else cohort[f]
        out[f] = min(own, cohort[f])
    return out


def test_every_team_can_admit_one_full_train_node_in_some_flavor() -> None:
    """A single train pod asks for every GPU of its node (8 on an H100 node): each team must
    reach 8 GPUs of one flavor, or its pods stay gated for ever (Kueue: "couldn't assign
    flavors"). The bound for a gang is in docs/queue.md (walk-kueue S3)."""
    for team in (q["metadata"]["name"] for q in _docs("clusterqueues.yaml")):
        reachable = _reachable_gpus(team)
        assert max(reachable.values()) >= 8, f"{team}: {reachable}"
    # the bound docs/queue.md states for the largest gang a team can ever be admitted with
    assert max(_reachable_gpus("default").values()) == 16
    assert max(_reachable_gpus("ml-research").values()) == 24
    queue_md = (REPO / "docs" / "queue.md").read_text()
    assert "16 GPUs" in queue_md and "24 GPUs" in queue_md


#: Kueue's pod-group metadata (v0.17.0 pkg/controller/jobs/pod/constants: GroupNameLabel,
#: GroupTotalCountAnnotation).
POD_GROUP_LABEL = "kueue.x-k8s.io/pod-group-name"
POD_GROUP_COUNT = "kueue.x-k8s.io/pod-group-total-count"


def test_a_kueue_pod_group_gang_is_not_restarted_in_place_by_volcano() -> None:
    """walk-kueue S2: Volcano recreates a restarted gang's pods under the same names, and
    Kueue keeps its finalizer on the failed pods of a retriable pod group until replacement
    pods exist (pod_controller.go FindMatchingWorkloads/finalizePods), so a restart would wait
    on pods that cannot be deleted. Since issue 47 the gang's pods name no queue, so Kueue
    does not manage them (pod_webhook.go Default; pod_controller.go Skip) and the run's
    Workload holds their quota: the pod-group label and count annotation did nothing but be
    validated (pod_webhook.go validatePodGroupMetadata), and are gone."""
    job = volcano_job()
    grouped = any(
        POD_GROUP_LABEL in t["template"]["metadata"]["labels"]
        or POD_GROUP_COUNT in (t["template"]["metadata"].get("annotations") or {})
        for t in job["spec"]["tasks"]
    )
    assert not grouped


def _quickstart_spec(tmp_path: Path, team: str | None = None) -> Path:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    assert "team: ml-research" in text
    # a registry image pinned by digest, so that nothing else in the spec is refused
    text = text.replace("oci-layout://examples/images/quickstart-oci@", "ghcr.io/x/y@")
    if team is not None:
        text = text.replace("team: ml-research", f"team: {team!r}")
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    return spec


@pytest.mark.parametrize(
    "team", ["ML-Research", "ml_research", "ml research", "a" * 64, "a" * 58, "a" * 56 + "-"]
)
def test_submit_refuses_a_team_that_cannot_name_a_kueue_local_queue(
    team: str, tmp_path: Path
) -> None:
    """walk-kueue S4: the spec's team is a tag value (capitals, spaces, '_' allowed), but it
    becomes the train pods' kueue.x-k8s.io/queue-name label, which the API server (label
    value) and Kueue's pod webhook (DNS-1123 subdomain) refuse: the pod was never created,
    after provision had rented the GPUs. Now `burst submit` refuses it first. The label is
    the team's LocalQueue, burst-<team>, so a team of 58 characters (a label of 64) is
    refused too."""
    from burst.admission.kueue_objects import TEAM_MAX
    from burst.errors import BadInputError
    from burst.runner.argo import build_workflow

    assert build_workflow(_quickstart_spec(tmp_path))["spec"]["arguments"]["parameters"]
    with pytest.raises(BadInputError) as err:
        build_workflow(_quickstart_spec(tmp_path, team))
    assert "\n" not in str(err.value) and "team" in str(err.value)
    assert "LocalQueue" in str(err.value) and "burst-<team>" in str(err.value)
    assert f"at most {TEAM_MAX} " in str(err.value) and TEAM_MAX == 57


def test_submit_takes_the_longest_team_whose_local_queue_is_a_label_value(tmp_path: Path) -> None:
    """A team of 57 characters: its LocalQueue burst-<team> (the run's Workload's queueName,
    and its team label) is 63 characters, a label value and a DNS-1123 subdomain."""
    from burst.admission.kueue_objects import local_queue_name
    from burst.admission.kueue_workload import workload_body
    from burst.documents.plan import Candidate
    from burst.runner.argo import build_workflow
    from burst.spec import load_spec

    team = "a" * 56 + "1"
    spec = _quickstart_spec(tmp_path, team)
    wf = build_workflow(spec)
    params = {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}
    assert params["team"] == team
    cand = Candidate(region="ap-southeast-3", provider="aws", capacity="spot", gpu_type="h100")
    label = workload_body(load_spec(spec), "r", cand, "burst")["spec"]["queueName"]
    assert label == local_queue_name(team) == "burst-" + team
    assert len(label) == 63
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*", label)


class _KueueApi(ThreadingHTTPServer):
    """A loopback API server holding deploy/kueue's objects and one Workload, which it
    answers as Kueue v0.17.0 writes it: pending (no quota) for ``pending`` reads, then
    admitted under ``flavor``. Every Workload request is recorded with whether the run's
    Terraform was applied by then (its workspace's main.tf)."""

    def __init__(self, applied: Path, flavor: str, pending: int) -> None:
        super().__init__(("127.0.0.1", 0), _KueueHandler)
        self.applied, self.flavor, self.pending = applied, flavor, pending
        self.workload: dict[str, Any] | None = None
        self.seen: list[tuple[str, bool]] = []  # (method, Terraform applied) per request
        self.reads: list[str] = []  # every read of the team's queue and the flavors
        base = "/apis/kueue.x-k8s.io/v1beta2"
        self.objects: dict[str, Any] = {}
        for lq in _docs("localqueues.yaml"):
            meta = lq["metadata"]
            self.objects[f"{base}/namespaces/{meta['namespace']}/localqueues/{meta['name']}"] = lq
        for q in _docs("clusterqueues.yaml"):
            self.objects[f"{base}/clusterqueues/{q['metadata']['name']}"] = q
        self.objects[f"{base}/resourceflavors"] = {"items": _docs("flavors.yaml")}

    def answer(self, method: str, path: str, body: Any) -> tuple[int, Any]:
        if "/workloads" in path:
            self.seen.append((method, self.applied.exists()))
            if method == "POST":
                self.workload = {**body, "status": {}}
                return 201, self.workload
            if method == "GET" and self.workload is not None:
                if sum(m == "GET" for m, _ in self.seen) <= self.pending:
                    why = (
                        "couldn't assign flavors to pod set train: insufficient quota for "
                        f"nvidia.com/gpu in flavor {self.flavor}"
                    )
                    pending = {"type": "QuotaReserved", "status": "False", "message": why}
                    return 200, {**self.workload, "status": {"conditions": [pending]}}
                return 200, {
                    **self.workload,
                    "status": {
                        "conditions": [
                            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
                            {"type": "Admitted", "status": "True", "reason": "Admitted"},
                        ],
                        "admission": {
                            "clusterQueue": "ml-research",
                            "podSetAssignments": [
                                {"name": "train", "flavors": {"nvidia.com/gpu": self.flavor}}
                            ],
                        },
                    },
                }
        if method == "GET" and path in self.objects:
            kinds = ("localqueues", "clusterqueues", "resourceflavors")
            self.reads += [k for k in kinds if f"/{k}" in path]
            return 200, self.objects[path]
        return 404, {"kind": "Status", "code": 404, "reason": "NotFound"}


class _KueueHandler(BaseHTTPRequestHandler):
    server: _KueueApi

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        code, doc = self.server.answer(self.command, self.path, body)
        raw = json.dumps(doc).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_DELETE = _serve

    def log_message(self, *args: Any) -> None:
        pass


def test_kueue_admits_a_run_before_its_gpus_are_rented(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """walk-kueue S6: Kueue gated the train pod, which existed only after provision had rented
    the run's node group, so a run waited in its team's queue on GPUs it was already paying
    for. Now the provision step itself (the process's code, on a cluster: its Kueue gate,
    dispatch, quota and the local Terraform stack) creates the run's Workload and waits for
    Kueue's admission before any Terraform apply: while the Workload is pending the run's
    workspace holds no applied stack; once admitted, it is applied under that flavor."""
    from burst.admission.kueue_reader import InCluster
    from burst.documents.plan import Candidate
    from burst.policy import evaluate, load_policies
    from burst.spec import load_spec
    from burst.stepio import main
    from burst.steps.provision import run

    run_id = "walk-s6"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        (REPO / "examples" / "quickstart.yaml")
        .read_text()
        .replace("checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp_path}/store")
    )
    job = load_spec(spec)
    cand = Candidate(region="ap-southeast-3", provider="aws", capacity="spot", gpu_type="h100")
    inputs = {
        "plan": {"candidates": [cand.to_json()]},
        "decision": evaluate(job, load_policies()).to_json(),
    }
    runs = tmp_path / "runs"
    argv = ["--spec", str(spec), "--run-id", run_id, "--runs-root", str(runs)]
    argv += ["--out", str(tmp_path / "provision.json")]
    for name, doc in inputs.items():
        (tmp_path / f"{name}.json").write_text(json.dumps(doc))
        argv += ["--input", f"{name}={tmp_path / name}.json"]

    server = _KueueApi(runs / run_id / "terraform" / "main.tf", "h100-ap-southeast-3-spot", 2)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    ca = tmp_path / "ca.crt"  # (plain HTTP on loopback: any CA file loads)
    ca.write_text(Path(ssl.get_default_verify_paths().openssl_cafile).read_text())
    api = InCluster(f"http://127.0.0.1:{server.server_address[1]}", "the-token", ca, "burst")
    # a step on the cluster: Kubernetes' and Argo's variables, the pod's account (the API
    # server above); the step's own variables set here so that they are restored after
    for key, value in {
        "KUBERNETES_SERVICE_HOST": "127.0.0.1",
        "KUBERNETES_SERVICE_PORT": str(server.server_address[1]),
        "ARGO_NODE_ID": "walk-s6-provision",
        "BURST_WORKFLOW_TEAM": job.team,
        "BURST_WORKFLOW_PRIORITY": str(job.priority),
        "BURST_KUEUE_POLL_S": "0.05",
        "BURST_STEP": "provision",
        "BURST_RUN_ID": run_id,
        "BURST_RUNS_ROOT": str(runs),
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("BURST_POD_DIR", raising=False)
    monkeypatch.delenv("BURST_TF_STACK", raising=False)
    monkeypatch.setattr(InCluster, "from_pod", staticmethod(lambda *a, **k: api))
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        code = main("provision", run, argv)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        server.shutdown()
        server.server_close()
    assert code == 0
    methods = [m for m, _ in server.seen]
    assert methods[:1] == ["POST"] and methods.count("GET") == 3, server.seen
    assert not any(applied for _, applied in server.seen), server.seen  # nothing rented yet
    # the team's queue is read once per provision, for its flavor gate, dispatch and quota
    assert sorted(server.reads) == ["clusterqueues", "localqueues", "resourceflavors"], server.reads
    assert server.workload is not None
    assert server.workload["spec"]["queueName"] == f"burst-{job.team}"
    doc = json.loads((tmp_path / "provision.json").read_text())
    assert doc["candidate"]["region"] == "ap-southeast-3", doc
    assert (runs / run_id / "terraform" / "main.tf").exists()  # applied once admitted


def test_every_local_queue_status_fits_kueue_v0_17() -> None:
    """walk-kueue S8: Kueue v0.17.0 writes every flavor of a LocalQueue's ClusterQueue into
    the LocalQueue's status (cache.go filterLocalQueueUsage, over every resource group), whose
    CRD allows 16 (flavorsReservation, flavorsUsage): with the 28 flavors of every provider,
    every LocalQueue status update was refused (no Active condition, no counts; admission went
    on). The bundle now holds the flavors of the site's providers, and the generator refuses
    more than 16 unless told the site's Kueue lifts the limit (kubernetes-sigs/kueue#12082)."""
    from burst.admission.kueue_objects import LOCAL_QUEUE_STATUS_FLAVORS_V0_17

    for q in _docs("clusterqueues.yaml"):
        count = sum(len(rg["flavors"]) for rg in q["spec"]["resourceGroups"])
        assert count <= LOCAL_QUEUE_STATUS_FLAVORS_V0_17, q["metadata"]["name"]


def _all_providers_flavors() -> list[dict[str, Any]]:
    """Every provider's flavors (a site whose Kueue lifts the LocalQueue status limit)."""
    from burst.admission.kueue_objects import kueue_objects
    from burst.providers import PROVIDER_STACKS

    objects = kueue_objects(providers=PROVIDER_STACKS, local_queue_status_64=True)
    return [o for o in objects if o["kind"] == "ResourceFlavor"]


@pytest.mark.parametrize("bundle", ["deploy/kueue", "every provider"])
def test_every_flavor_names_nodes_no_other_flavor_names(bundle: str) -> None:
    """walk-kueue S9: hybrid nodes (gcp, azure, nebius) carried no region label, so their
    flavors of one GPU type and capacity had the same nodeLabels: Kueue admitted a hybrid pod
    under the first of them with quota (it landed right, the quota was charged to that
    flavor's name). The hybrid stacks now label their nodes with the region, and so do the
    flavors."""
    flavors = _docs("flavors.yaml") if bundle == "deploy/kueue" else _all_providers_flavors()
    seen: dict[tuple[tuple[str, str], ...], str] = {}
    for f in flavors:
        key = tuple(sorted(f["spec"]["nodeLabels"].items()))
        assert key not in seen, f"{f['metadata']['name']} and {seen.get(key)}"
        seen[key] = f["metadata"]["name"]


def test_no_flavor_opens_every_run_s_nodes() -> None:
    """walk-kueue S10: Kueue appends a flavor's tolerations to every pod it admits under it
    (podset.go FromAssignment/Merge). The hybrid nodes' taint burst/run-id=<run> keeps other
    pods off a run's nodes; a flavor tolerating it (Exists) would hand that to every pod of the
    flavor. The pod gets its run's exact toleration from provision instead."""
    for f in _docs("flavors.yaml"):
        for t in f["spec"].get("tolerations") or []:
            assert t.get("key") not in ("burst/run-id", None, ""), f["metadata"]["name"]
            if t.get("operator") == "Exists":
                assert t["key"] == "nvidia.com/gpu", f["metadata"]["name"]
