"""Quota first, then rent, on the engines tier (issue 47): provision holds the run's quota
through its own Kueue Workload before it applies any Terraform, and a run whose team has no
quota left waits in the queue renting nothing.

The real Kueue v0.17.0 (webhooks, scheduler), the real Argo, the stand-in cloud (a run's nodes
join only from applied Terraform). The team's ClusterQueue is cut to one run's GPUs with no
borrowing; two quickstart runs of that team are submitted; the second's provision waits with
no node of its run joined until the first's teardown deletes its Workload, then it rents and
succeeds. The rentals over time (node join and leave times) are printed for the note.

The template applied is the one burst/pipelines compiles now (its train pods carry no Kueue
queue label), so the test holds before and after deploy/argo is regenerated."""

from __future__ import annotations

import copy
import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from runs import cluster_spec, submit, wait_finished, wait_until

from burst.admission.kueue_workload import admitted, workload_name
from burst.pipelines.build import render
from burst.storage.loopback import LoopbackS3
from devtools.cluster.tier import REPO, Tier

pytestmark = pytest.mark.cluster

TEAM = "ml-research"
GPU = "nvidia.com/gpu"
ONE_RUN_GPUS = "8"  # the quickstart's gpu_count: one node of 8


class Rentals(threading.Thread):
    """When each node of a run (label burst/run-id) joined the cluster. The tier's cloud adds a
    node when the run's Terraform state holds it and never removes the Node object, so a
    rental's end is its teardown's destroy (:func:`teardown_span`)."""

    def __init__(self, tier: Tier) -> None:
        super().__init__(daemon=True)
        self.tier = tier
        self.t0 = time.time()
        self.joined: dict[str, tuple[str, float]] = {}  # node -> (run, s since t0)
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                items = self.tier.cp.get_json("nodes")["items"]
            except Exception:  # (the API server busy: the next look)
                items = []
            now = time.time() - self.t0
            for n in items:
                run = (n["metadata"].get("labels") or {}).get("burst/run-id")
                if run:
                    self.joined.setdefault(n["metadata"]["name"], (run, now))
            self.halt.wait(0.5)

    def of(self, run: str) -> list[tuple[str, float]]:
        return sorted(
            ((n, at) for n, (r, at) in self.joined.items() if r == run), key=lambda x: x[1]
        )


def _since(t0: float, stamp: str | None) -> float | None:
    if not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - t0


def teardown_span(wf: dict[str, Any], t0: float) -> tuple[float | None, float | None]:
    """When the run's teardown (its destroy, then the Workload's delete) started and ended."""
    nodes = [
        n for n in ((wf.get("status") or {}).get("nodes") or {}).values()
        if n.get("templateName") == "teardown" and n.get("type") == "Pod"
    ]  # fmt: skip
    if not nodes:
        return None, None
    last = max(nodes, key=lambda n: n.get("startedAt") or "")
    return _since(t0, last.get("startedAt")), _since(t0, last.get("finishedAt"))


def table(rentals: Rentals, runs: dict[str, tuple[str, dict[str, Any]]]) -> str:
    rows = ["run     node                               joined_s  teardown_s (start-end)"]
    for label, (run, wf) in runs.items():
        start, end = teardown_span(wf, rentals.t0)
        for node, at in rentals.of(run):
            rows.append(f"{label:7} {node:34} {at:8.1f}  {start or 0:8.1f}-{end or 0:.1f}")
    return "\n".join(rows)


@pytest.fixture
def one_run_of_quota(tier: Tier) -> Iterator[None]:
    """The team's ClusterQueue cut to one run's GPUs per flavor, no borrowing (restored)."""
    cq = tier.cp.get_json("clusterqueue.kueue.x-k8s.io", TEAM)
    spec = copy.deepcopy(cq["spec"])
    for group in spec["resourceGroups"]:
        for flavor in group["flavors"]:
            for r in flavor["resources"]:
                if r["name"] == GPU:
                    r["nominalQuota"] = ONE_RUN_GPUS
                    r["borrowingLimit"] = "0"
    patch = yaml.safe_dump({"spec": {"resourceGroups": spec["resourceGroups"]}})
    tier.cp.kubectl(
        "patch", "clusterqueue.kueue.x-k8s.io", TEAM, "--type=merge", "-p", patch
    )  # fmt: skip
    try:
        yield
    finally:
        restore = yaml.safe_dump({"spec": {"resourceGroups": cq["spec"]["resourceGroups"]}})
        tier.cp.kubectl(
            "patch", "clusterqueue.kueue.x-k8s.io", TEAM, "--type=merge", "-p", restore
        )  # fmt: skip


@pytest.fixture
def compiled_template(tier: Tier) -> Iterator[None]:
    """burst-train as burst/pipelines compiles it now (restored to deploy/argo's after)."""

    def put(text: str) -> None:
        doc = yaml.safe_load(text)
        doc["metadata"]["namespace"] = "burst"  # (deploy/kustomization.yaml's namespace)
        tier.cp.apply([doc])

    put(render("burst-train"))
    try:
        yield
    finally:
        put((REPO / "deploy" / "argo" / "burst-train.yaml").read_text())


def _workload(tier: Tier, run: str) -> dict[str, Any] | None:
    items = tier.cp.get_json("workloads.kueue.x-k8s.io", "-n", "burst")["items"]
    for w in items:
        if w["metadata"]["name"] == workload_name(run):
            return dict(w)
    return None


def _spec(tmp_path: Path, steps: int) -> Path:
    """The quickstart on spot capacity in one region: one flavor (a spot run with an on-demand
    fallback may be admitted under the region's on-demand flavor too, and a run's plan may
    choose another region, whose flavor has quota of its own)."""
    path = cluster_spec(tmp_path, "quota-tier", steps=steps)
    doc = yaml.safe_load(path.read_text())
    doc["compute"]["capacity"] = "spot"
    doc["compute"]["regions"] = doc["compute"]["regions"][:1]  # one flavor: the quota is per flavor
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.timeout(1800)
def test_a_run_without_quota_waits_queued_renting_nothing(
    tier: Tier,
    submitter: Path,
    store: LoopbackS3,
    tmp_path: Path,
    one_run_of_quota: None,
    compiled_template: None,
) -> None:
    store.create_bucket("quota-tier")
    rentals = Rentals(tier)
    rentals.start()
    queued_with: list[list[tuple[str, float]]] = []  # the second's nodes while it was queued

    def second_queued(run: str) -> bool:
        conditions = ((_workload(tier, run) or {}).get("status") or {}).get("conditions", [])
        if any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in conditions):
            queued_with.append(rentals.of(run))
            return True
        return False

    try:
        with tier.pod_env(BURST_STEP_PACE_S="0.2", BURST_KUEUE_POLL_S="1"):
            a_dir, b_dir = tmp_path / "a", tmp_path / "b"
            a_dir.mkdir()
            b_dir.mkdir()
            first = submit(tier, submitter, _spec(a_dir, steps=300), a_dir)
            wait_until(
                tier, first, "its Workload admitted",
                lambda: admitted(_workload(tier, first) or {}), timeout=900,
            )  # fmt: skip
            wait_until(tier, first, "its node joined", lambda: bool(rentals.of(first)), 900)
            second = submit(tier, submitter, _spec(b_dir, steps=10), b_dir)
            # the second waits in the queue (Kueue says it does not fit) with no node of it
            wait_until(
                tier, second, "its Workload pending in the queue",
                lambda: second_queued(second), timeout=900,
            )  # fmt: skip
            assert tier.workflow(first)["status"]["phase"] == "Running"
            first_wf = wait_finished(tier, first, timeout=900)
            second_wf = wait_finished(tier, second, timeout=900)
    finally:
        rentals.halt.set()
        rentals.join(5)
    runs = {"first": (first, first_wf), "second": (second, second_wf)}
    print("\nrentals over time (s since the first submit; a rental ends in its teardown):")
    print(table(rentals, runs))
    assert first_wf["status"]["phase"] == "Succeeded", tier.describe(first)
    assert second_wf["status"]["phase"] == "Succeeded", tier.describe(second)
    assert queued_with == [[]], queued_with  # queued: nothing of it rented
    a_nodes, b_nodes = rentals.of(first), rentals.of(second)
    assert len(a_nodes) == 1 and len(b_nodes) == 1, table(rentals, runs)
    # the second rented only once the first's teardown had begun releasing its rental and quota
    a_teardown, _ = teardown_span(first_wf, rentals.t0)
    assert a_teardown is not None and b_nodes[0][1] >= a_teardown - 1.0, table(rentals, runs)
    # teardown deleted both Workloads (the quota released)
    assert _workload(tier, first) is None and _workload(tier, second) is None
    provision = tier.container_logs(f"{second}-provision")
    assert f"queued in burst-{TEAM}" in provision, provision[-3000:]
