"""Two teams contend for one flavor's quota on the engines tier, and the run Kueue preempts
releases its rental, waits in its queue renting nothing, and resumes (issue 47).

The real Kueue v0.17.0, Argo, kubelets and the tier's cloud, as the other tier tests. The
shipped objects (deploy/kueue) put every team's ClusterQueue in the cohort ``burst``: a team
may borrow the GPUs another leaves idle, and ``reclaimWithinCohort: Any`` lets the lender take
them back by preempting the borrower, whatever the two runs' priorities
(``withinClusterQueue`` and ``borrowWithinCohort`` do not decide here: the preemptor is within
its own nominal quota). That is what a user of the shipped objects meets when a team runs more
than its share while another team is idle. The tier affords one rental at a time, so the
cohort's quota of each flavor is cut to one run's GPUs (restored after); the preemption
settings are the shipped ones:

- team ``default`` (run A, priority low): no GPUs of its own, may borrow 8;
- team ``ml-research`` (run B, priority normal): 8 of its own, lent while idle.

1. A is admitted borrowing B's idle GPUs, rents its node and trains.
2. B is submitted; its Workload needs its own quota back: Kueue evicts A's Workload
   (Preempted) and B waits in its queue with no node of it.
3. A's eviction watcher (burst/admission/kueue_watch.py) posts the notice; A's train step
   saves and exits 76; the pipeline requeues A. Its provision destroys the earlier rental,
   and only then gives the quota back by deleting the evicted Workload (a team's quota is the
   GPUs it may rent at once: the preemptor must not rent while the victim's rental stands);
   A waits in its queue again under a new Workload.
4. B is admitted, rents, trains and succeeds; its teardown deletes its Workload.
5. A is admitted again, rents again, resumes from the step it saved (not 0) and succeeds.

The order in step 3 is asserted from the requeue's provision log and the clocks: before
2e0ba46 the requeue deleted the evicted Workload first, and B was admitted (and would rent, on a
cloud for the destroy's minutes) while A's rental stood; this test found it.

The tier's cloud joins a node when a run's Terraform state holds it and never removes one
(docs/reference/engines-tier.md): A's second placement names the node of its first, so its
rentals are read from the pipeline instead: a placement rents at the end of its provision
(its apply) and releases at the destroy of the requeue's provision or of teardown. The table
printed (seconds since A's submit) is the note's "rentals over time".
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from runs import cluster_spec, container_log, pod_nodes, submit, wait_finished, wait_until

from burst.admission.kueue_workload import workload_name
from burst.storage.loopback import LoopbackS3
from devtools.cluster.tier import Tier

pytestmark = pytest.mark.cluster

GPU = "nvidia.com/gpu"
ONE_RUN_GPUS = "8"  # the quickstart's gpu_count: one node of 8
LENDER, BORROWER = "ml-research", "default"  # B's team, A's team
#: A trains slowly until Kueue evicts it (B's pipeline reaches provision meanwhile); every
#: later train pod (B's, A's resumed one) quickly
SLOW_PACE_S, FAST_PACE_S = "2", "0.02"
A_STEPS, B_STEPS = 150, 10
#: fewer saves than the quickstart's 5: a save in flight holds the next one back, and the
#: resumed attempt's saves were most of its time
CHECKPOINT_EVERY = 20
#: what the requeue's provision logs (burst/admission/kueue_workload.py, burst/steps/provision.py)
DESTROYING = "queued again: destroying the earlier placement's rental"
REMADE = "is left from an earlier placement: making it again"


@dataclass
class Holding:
    """One Workload of a run (a placement's quota), as the watcher saw it: seconds since t0."""

    run: str
    uid: str
    seen: float
    reserved: float | None = None  # first seen (a look lags the truth by up to a second or two)
    stamped: float | None = None  # Kueue's QuotaReserved lastTransitionTime (whole seconds)
    evicted: float | None = None
    why: str = ""
    released: float | None = None  # being deleted, or gone: its quota is free


class Timeline(threading.Thread):
    """Every second: when each node of a run (label burst/run-id) joined, and each Workload of
    a run got its quota, was evicted and was released."""

    def __init__(self, tier: Tier) -> None:
        super().__init__(daemon=True)
        self.tier = tier
        self.t0 = time.time()
        self.joined: dict[str, tuple[str, float]] = {}  # node -> (run, s since t0)
        self.holdings: dict[str, Holding] = {}  # Workload uid -> what it held when
        self.lock = threading.Lock()
        self.halt = threading.Event()

    def look(self) -> None:
        try:
            items = self.tier.cp.get_json("nodes,workloads.kueue.x-k8s.io", "-A")["items"]
        except Exception:  # (the API server busy: the next look; nothing is taken as gone)
            return
        now = time.time() - self.t0
        present = set()
        with self.lock:
            for item in items:
                meta = item["metadata"]
                labels = meta.get("labels") or {}
                if item["kind"] == "Node":
                    if labels.get("burst/run-id"):
                        self.joined.setdefault(meta["name"], (labels["burst/run-id"], now))
                    continue
                run = labels.get("burst.dev/run-id")
                if not run:
                    continue
                present.add(meta["uid"])
                h = self.holdings.setdefault(meta["uid"], Holding(run, meta["uid"], now))
                conditions = {
                    c["type"]: c for c in (item.get("status") or {}).get("conditions") or []
                }
                if h.reserved is None and _true(conditions, "QuotaReserved"):
                    h.reserved = now
                    h.stamped = _since(
                        self.t0, conditions["QuotaReserved"].get("lastTransitionTime")
                    )
                if h.evicted is None and _true(conditions, "Evicted"):
                    c = conditions["Evicted"]
                    h.evicted, h.why = now, f"{c.get('reason')}: {c.get('message')}"
                if h.released is None and meta.get("deletionTimestamp"):
                    h.released = now
            for h in self.holdings.values():
                if h.released is None and h.uid not in present:
                    h.released = now

    def run(self) -> None:
        while not self.halt.is_set():
            self.look()
            self.halt.wait(1.0)

    def nodes(self, run: str) -> list[tuple[str, float]]:
        with self.lock:
            found = [(n, at) for n, (r, at) in self.joined.items() if r == run]
        return sorted(found, key=lambda x: x[1])

    def of(self, run: str) -> list[Holding]:
        with self.lock:
            found = [copy.copy(h) for h in self.holdings.values() if h.run == run]
        return sorted(found, key=lambda h: h.seen)


def _true(conditions: dict[str, Any], kind: str) -> bool:
    return (conditions.get(kind) or {}).get("status") == "True"


def _since(t0: float, stamp: str | None) -> float | None:
    if not stamp:
        return None
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() - t0


def _span(node: dict[str, Any], t0: float) -> tuple[float | None, float | None]:
    return _since(t0, node.get("startedAt")), _since(t0, node.get("finishedAt"))


def _exit(node: dict[str, Any]) -> str:
    return str((node.get("outputs") or {}).get("exitCode", "-"))


def log_lines(tier: Tier, pod_prefix: str, t0: float) -> list[tuple[float, str]]:
    """The steps' JSON log lines (BURST_LOG_JSON) of the pods whose names start with
    ``pod_prefix``: (s since t0, message), in time order (a stable sort: one process's lines
    of the same millisecond keep their order)."""
    out: list[tuple[float, str]] = []
    for line in container_log(tier, pod_prefix).splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("ts"), str):
            at = _since(t0, doc["ts"])
            if at is not None:
                out.append((at, str(doc.get("msg", ""))))
    return sorted(out, key=lambda x: x[0])


def first(lines: list[tuple[float, str]], text: str) -> tuple[int, float] | None:
    """The index and time of the first line that holds ``text``."""
    for i, (at, msg) in enumerate(lines):
        if text in msg:
            return i, at
    return None


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}"


def table(timeline: Timeline, runs: dict[str, tuple[str, dict[str, Any]]], tier: Tier) -> str:
    """One row per placement: its quota (Workload reserved, evicted, released), its rental
    (rented: the node joined, or on a later placement the provision's apply; released: the next
    provision's destroy, or teardown's), its train attempt."""
    t0 = timeline.t0
    rows = [
        "run  placement  quota_reserved  evicted  rented  train (start-end, exit)  "
        "rental_released  quota_released"
    ]
    for label, (run, wf) in runs.items():
        provisions, trains = pod_nodes(wf, "provision"), pod_nodes(wf, "train")
        teardowns = pod_nodes(wf, "teardown")
        holdings = [h for h in timeline.of(run) if h.reserved is not None]
        nodes = timeline.nodes(run)
        destroyed = first(log_lines(tier, f"{run}-provision", t0), DESTROYING)
        for k, prov in enumerate(provisions):
            h = holdings[k] if k < len(holdings) else None
            rented = nodes[0][1] if k == 0 and nodes else _span(prov, t0)[1]
            train = trains[k] if k < len(trains) else {}
            ts, te = _span(train, t0) if train else (None, None)
            if k + 1 < len(provisions):
                released = _fmt(destroyed[1]) if destroyed else "-"
            elif teardowns:
                start, end = _span(teardowns[-1], t0)
                released = f"{_fmt(start)}-{_fmt(end)} (teardown)"
            else:
                released = "-"
            rows.append(
                f"{label:4} {k + 1:9}  {_fmt(h.stamped if h else None):>14}  "
                f"{_fmt(h.evicted if h else None):>7}  {_fmt(rented):>6}  "
                f"{_fmt(ts)}-{_fmt(te)} ({_exit(train) if train else '-'})  "
                f"{released}  {_fmt(h.released if h else None)}"
            )
    return "\n".join(rows)


@pytest.fixture
def cohort_of_one_run(tier: Tier) -> Iterator[None]:
    """The cohort's GPUs of every flavor cut to one run's: the borrower's team has none of
    its own and may borrow one run's, the lender's has one run's and borrows none. The
    shipped preemption settings stay (restored after)."""
    shape = {BORROWER: ("0", ONE_RUN_GPUS), LENDER: (ONE_RUN_GPUS, "0")}
    before = {}
    for team, (nominal, borrowing) in shape.items():
        cq = tier.cp.get_json("clusterqueue.kueue.x-k8s.io", team)
        before[team] = cq["spec"]["resourceGroups"]
        groups = copy.deepcopy(before[team])
        for group in groups:
            for flavor in group["flavors"]:
                for r in flavor["resources"]:
                    if r["name"] == GPU:
                        r["nominalQuota"], r["borrowingLimit"] = nominal, borrowing
        patch = yaml.safe_dump({"spec": {"resourceGroups": groups}})
        tier.cp.kubectl(
            "patch", "clusterqueue.kueue.x-k8s.io", team, "--type=merge", "-p", patch
        )  # fmt: skip
    try:
        yield
    finally:
        for team, groups in before.items():
            restore = yaml.safe_dump({"spec": {"resourceGroups": groups}})
            tier.cp.kubectl(
                "patch", "clusterqueue.kueue.x-k8s.io", team, "--type=merge", "-p", restore
            )  # fmt: skip


def _spec(tmp_path: Path, bucket: str, team: str, priority: str, steps: int) -> Path:
    """The quickstart of ``team`` at ``priority``, on spot capacity in one region: one flavor,
    whose quota both teams' runs need."""
    path = cluster_spec(tmp_path, bucket, steps=steps)
    doc = yaml.safe_load(path.read_text())
    doc["training"]["checkpoint"]["interval_steps"] = CHECKPOINT_EVERY
    doc["team"], doc["priority"] = team, priority
    doc["compute"]["capacity"] = "spot"
    doc["compute"]["regions"] = doc["compute"]["regions"][:1]
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _queued(tier: Tier, run: str) -> bool:
    """Kueue said the run's Workload does not fit now (QuotaReserved False)."""
    got = tier.cp.kubectl(
        "get", "workloads.kueue.x-k8s.io", workload_name(run), "-n", "burst", "-o", "json",
        check=False,
    )  # fmt: skip
    if got.returncode != 0:
        return False
    conditions = (json.loads(got.stdout).get("status") or {}).get("conditions") or []
    return any(c["type"] == "QuotaReserved" and c["status"] == "False" for c in conditions)


@pytest.mark.timeout(1800)
def test_a_preempted_run_releases_its_rental_waits_and_resumes(
    tier: Tier,
    submitter: Path,
    store: LoopbackS3,
    tmp_path: Path,
    cohort_of_one_run: None,
) -> None:
    store.create_bucket("evict-a")
    store.create_bucket("evict-b")
    timeline = Timeline(tier)
    timeline.start()
    b_queued_with: list[list[tuple[str, float]]] = []  # B's nodes while Kueue held it back
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir()
    b_dir.mkdir()
    try:
        with tier.pod_env(BURST_STEP_PACE_S=SLOW_PACE_S, BURST_KUEUE_POLL_S="1"):
            a = submit(tier, submitter, _spec(a_dir, "evict-a", BORROWER, "low", A_STEPS), a_dir)
            wait_until(
                tier, a, "its Workload admitted (borrowing)",
                lambda: any(h.reserved is not None for h in timeline.of(a)), timeout=900,
            )  # fmt: skip
            wait_until(tier, a, "its node joined", lambda: bool(timeline.nodes(a)), 900)
            wait_until(
                tier, a, "its train step training",
                lambda: "train.first_step" in container_log(tier, f"{a}-train"), timeout=600,
            )  # fmt: skip
            b = submit(tier, submitter, _spec(b_dir, "evict-b", LENDER, "normal", B_STEPS), b_dir)

            def b_queued() -> bool:
                if _queued(tier, b):
                    b_queued_with.append(timeline.nodes(b))
                    return True
                return False

            wait_until(tier, b, "its Workload held back by Kueue", b_queued, timeout=900)
            wait_until(
                tier, a, "its Workload evicted by Kueue",
                lambda: any(h.evicted is not None for h in timeline.of(a)), timeout=300,
            )  # fmt: skip
            tier.set_pod_env(BURST_STEP_PACE_S=FAST_PACE_S)  # the later train pods
            b_wf = wait_finished(tier, b, timeout=900)
            a_wf = wait_finished(tier, a, timeout=900)
    finally:
        timeline.halt.set()
        timeline.join(5)
    runs = {"A": (a, a_wf), "B": (b, b_wf)}
    shown = table(timeline, runs, tier)
    print(f"\nrentals over time (s since A's submit; teams {BORROWER} (A) and {LENDER} (B)):")
    print(shown)
    print(
        "(quota_reserved: Kueue's stamp and train: Argo's, whole seconds rounded down; "
        "evicted, quota_released and a node's join: seen by a look every second)"
    )
    print("A's first Workload: " + "; ".join(h.why for h in timeline.of(a) if h.why))
    assert a_wf["status"]["phase"] == "Succeeded", tier.describe(a)
    assert b_wf["status"]["phase"] == "Succeeded", tier.describe(b)

    # (a rental is compared with Kueue's stamp of its quota, and Argo's of its steps: both in
    # whole seconds, rounded down alike, so "not before" holds without a tolerance)

    # B waited in its queue with nothing of it rented, then held one placement
    assert b_queued_with == [[]], b_queued_with
    (b_held,) = [h for h in timeline.of(b) if h.reserved is not None]
    assert b_held.evicted is None, shown
    # A: its first Workload admitted, then evicted by Kueue for B; a second one admitted
    a_held = [h for h in timeline.of(a) if h.reserved is not None]
    assert len(a_held) == 2, shown
    assert a_held[0].evicted is not None and a_held[0].why.startswith("Preempted"), a_held[0]
    assert a_held[1].evicted is None, a_held[1]

    # A's first train attempt saved and exited 76 (quota taken); the second resumed from it
    a_trains = pod_nodes(a_wf, "train")
    assert [_exit(n) for n in a_trains] == ["76", "0"], shown
    train_log = container_log(tier, f"{a}-train")
    evicted_at = [int(s) for s in re.findall(r"Kueue evicted the run at step (\d+)", train_log)]
    resumed = [int(s) for s in re.findall(r"resumed from the full checkpoint at step (\d+)",
                                          train_log)]  # fmt: skip
    assert evicted_at and evicted_at[0] > 0, train_log[-3000:]
    assert resumed == [evicted_at[0]], (resumed, evicted_at, train_log[-3000:])

    # A's requeue waited in its queue again (a queued run rents nothing) after its provision
    # destroyed the earlier rental
    lines = log_lines(tier, f"{a}-provision", timeline.t0)
    destroyed, remade = first(lines, DESTROYING), first(lines, REMADE)
    assert destroyed is not None and remade is not None, "\n".join(m for _, m in lines)
    waited = [i for i, (_, m) in enumerate(lines) if f"queued in burst-{BORROWER}" in m]
    assert any(i > remade[0] for i in waited), "\n".join(m for _, m in lines)

    # the rentals in time: B rented only after A's train step had exited; A rented again only
    # once Kueue admitted it again, after B's teardown had released B's quota
    b_nodes = timeline.nodes(b)
    assert len(b_nodes) == 1 and b_held.reserved is not None and b_held.stamped is not None
    assert b_nodes[0][1] >= b_held.stamped, shown
    _, a_first_end = _span(a_trains[0], timeline.t0)
    assert a_first_end is not None and b_nodes[0][1] >= a_first_end, shown
    assert b_held.released is not None and a_held[1].reserved is not None, shown
    assert a_held[1].reserved >= b_held.released, shown
    a_provisions = pod_nodes(a_wf, "provision")
    assert len(a_provisions) == 2, shown
    _, a_rented_again = _span(a_provisions[1], timeline.t0)
    assert a_held[1].stamped is not None, shown
    assert a_rented_again is not None and a_rented_again >= a_held[1].stamped, shown
    # A's only node joined while its first Workload held the quota
    a_nodes = timeline.nodes(a)
    assert len(a_nodes) == 1 and a_held[0].stamped is not None, shown
    assert a_nodes[0][1] >= a_held[0].stamped, shown
    # teardown released both quotas
    assert all(h.released is not None for h in timeline.of(a) + timeline.of(b)), shown

    # the quota A's evicted Workload held went to B only after A's earlier rental was
    # destroyed (one process's log order, then the clocks): no two rentals of that quota
    ordered = destroyed[0] < remade[0] and destroyed[1] <= b_held.reserved <= b_nodes[0][1]
    assert ordered, (
        "the requeue gave the evicted Workload's quota back (deleted it) before destroying "
        f"the rental it covered, and B was admitted meanwhile:\n{shown}\n"
        + "\n".join(f"{at:8.1f}  {m}" for at, m in lines if at >= a_first_end)
    )
