"""Recovery through the compiled burst-train template, executed by the local runner: real
step processes, real Terraform, real training, real signals (slow: whole quickstart runs).

* bug 2 of issue 25: a requeue after a capacity failover went back to the region train was
  lost in; it must go to a third region;
* bug 6: a train step killed by SIGKILL ended the run failed (137); it restarts from the last
  committed checkpoint, a bounded number of times, then the run fails cleanly.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.runner.local import LocalRunner, RunOptions
from burst.runs import run_paths

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "examples" / "images" / "quickstart-oci"

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def spec(quickstart_in: Path) -> Path:
    """The quickstart (store in tmp) with the committed, signed demo image (an OCI layout)."""
    index = json.loads((LAYOUT / "index.json").read_text())
    digest = next(
        m["digest"]
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "quickstart"
    )
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["image"]["reference"] = f"oci-layout://examples/images/quickstart-oci@{digest}"
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return quickstart_in


def _with_recovery(spec: Path, **recovery: Any) -> None:
    doc = yaml.safe_load(spec.read_text())
    doc["compute"]["recovery"] = recovery
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))


def _docs(paths: Any, name: str) -> dict[str, Any]:
    return json.loads((paths.dir / "docs" / f"{name}.json").read_text())


def test_a_requeue_after_a_capacity_failover_lands_in_a_third_region(
    runs_root: Path, spec: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plan's first region has no capacity (provision fails over to the second); train
    is preempted there with no retry in place, and is requeued: in a third region, not back
    in the second (failed before the fix: the requeue skipped one candidate of the plan and
    the provisioner put the region that had succeeded first).

    The requeue is the template's: a placement again (provision, the run's identity, train)
    in the plan's next candidate, and the run succeeds. The site configuration is per region
    (BURST_TF_SITE_VARS, a directory): the requeue's provision applies its own region's file.
    (This was also tests/runner/test_local_run.py's requeue test, a run of its own.)"""
    probe = run_paths("probe-plan", runs_root)
    LocalRunner(probe, spec, RunOptions(fail_at=("verify-image",))).run()
    plan = _docs(probe, "plan")["candidates"]
    first = plan[0]["region"]
    second = next(c["region"] for c in plan if c["region"] != first)
    sites = tmp_path / "sites"
    sites.mkdir()
    for region in {c["region"] for c in plan}:
        (sites / f"{region}.tfvars").write_text(f'vpc_id = "vpc-{region}"\n')
    monkeypatch.setenv("BURST_TF_SITE_VARS", str(sites))

    paths = run_paths("wf-third", runs_root)
    options = RunOptions(
        env={"BURST_SIMULATE_NO_CAPACITY": first, "BURST_PREEMPT_AT_STEPS": "12"},
        parameters={"preemptions-per-region": "0"},
    )
    r = LocalRunner(paths, spec, options).run()
    assert r["status"] == "succeeded", r["failure"]
    assert r["resources_remaining"] == 0
    by_name = {s["name"]: s for s in r["steps"]}
    assert list(by_name) == ["preflight", "plan", "verify-image", "provision", "train", "teardown"]
    assert by_name["train"]["placements"] == by_name["provision"]["placements"] == 2
    assert [a["exit_code"] for a in by_name["train"]["attempt_details"]] == [75, 0]
    # the pods, in order: the run's own identity (resource templates: recorded) is one
    # parallel step group, its two pods started at the same time, in either order
    identity = {"service-account", "role-binding"}
    pods = [p.name.split("-", 1)[1] for p in sorted((paths.dir / "pods").iterdir())]
    placement: list[str | set[str]] = ["provision", identity, "train"]
    expected: list[str | set[str]] = [
        "preflight", "plan", "verify-image", *placement, *placement, "teardown"
    ]  # fmt: skip
    grouped: list[str | set[str]] = []
    for name in pods:
        if name in identity and grouped and isinstance(grouped[-1], set) and len(grouped[-1]) < 2:
            grouped[-1].add(name)
        else:
            grouped.append({name} if name in identity else name)
    assert grouped == expected, pods
    doc = _docs(paths, "provision")  # the last placement's
    assert doc["placement"] == 1
    assert doc["candidate"]["region"] not in (first, second)
    assert doc["recovery"]["event"] == "requeue"
    assert [p["region"] for p in doc["recovery"]["history"]] == [second]
    region = doc["candidate"]["region"]
    assert [a["site_vars"] for a in doc["attempts"]] == [f"{region}.tfvars"]
    assert json.loads(doc["outputs"]["site"]["vpc_id"]) == f"vpc-{region}"


def _train_pids(run_id: str) -> list[int]:
    """The train step's main process of this run (``python -m burst.steps.train ... --run-id``)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"burst.steps.train" in argv and run_id.encode() in argv and b"-m" in argv:
            pids.append(int(entry.name))
    return pids


class Killer(threading.Thread):
    """SIGKILLs the train step each time its checkpoint writer holds before committing the
    armed step (``BURST_CHECKPOINT_FAULT_ACTION=pause:DIR``): the last committed checkpoint
    is then known, and the kill is a real signal from outside, as the OOM killer's."""

    def __init__(self, where: Path, run_id: str, times: int) -> None:
        super().__init__(daemon=True)
        self.where, self.run_id, self.times = where, run_id, times
        self.kills: list[int] = []
        self.done = threading.Event()

    def run(self) -> None:
        paused = self.where / "paused"
        deadline = time.monotonic() + 540
        while len(self.kills) < self.times and time.monotonic() < deadline:
            if self.done.wait(0.05) or not paused.exists():
                continue
            pids = _train_pids(self.run_id)
            if not pids:
                continue
            paused.unlink()
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            self.kills.append(pids[0])


def _armed(tmp_path: Path, point: str, *, once: bool) -> tuple[Path, dict[str, str]]:
    """Hold the checkpoint writer at ``point`` (burst.faults.checkpoint), in every attempt
    or in the first only."""
    where = tmp_path / "pause"
    where.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": point,
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{where}",
    }
    if once:
        env["BURST_CHECKPOINT_FAULT_ONCE"] = str(where / "fired")
    return where, env


@pytest.mark.parametrize(
    ("point", "resumed"),
    [
        # the last step committed, the step not yet exited (a kill mid-run, the last full
        # checkpoint before it resumed: test_a_kill_in_a_two_rank_train_step_ends_succeeded)
        ("after-latest@30", 30),
    ],
)
def test_a_killed_train_restarts_from_the_last_commit_and_the_run_succeeds(
    runs_root: Path, spec: Path, tmp_path: Path, point: str, resumed: int
) -> None:
    """SIGKILL of the train step while its checkpoint writer holds at ``point``: the place
    template restarts it in the same placement (default recovery), it resumes from the
    last committed full checkpoint and the run succeeds (failed before the fix: status
    failed, 137)."""
    where, env = _armed(tmp_path, point, once=True)
    # a run id of each case's own: the killer kills every train process of its run id, and
    # the cases may run at once on two test workers
    run_id = f"wf-kill-{point.split('@')[0]}"
    killer = Killer(where, run_id, times=1)
    killer.start()
    paths = run_paths(run_id, runs_root)
    try:
        r = LocalRunner(paths, spec, RunOptions(env=env)).run()
    finally:
        killer.done.set()
    assert len(killer.kills) == 1
    assert r["status"] == "succeeded", r["failure"]
    assert r["final_step"] == 30
    train = {s["name"]: s for s in r["steps"]}["train"]
    assert [a["exit_code"] for a in train["attempt_details"]] == [137, 0]
    assert train["placements"] == 2  # the restart is a placement in the same candidate
    doc = _docs(paths, "provision")
    assert doc["recovery"]["event"] == "restart" and doc["recovery"]["restarts"] == 1
    assert doc["recovery"]["history"][0]["region"] == doc["candidate"]["region"]
    assert _docs(paths, "train")["resumed_from"] == resumed  # the last committed checkpoint
    assert r["resources_remaining"] == 0


def test_kills_past_the_restart_count_fail_the_run_cleanly(
    runs_root: Path, spec: Path, tmp_path: Path
) -> None:
    """``max_restarts_on_kill: 1``: killed twice, train is restarted once; the second kill
    ends the run failed with train's 137, teardown leaves nothing, no traceback."""
    _with_recovery(spec, max_restarts_on_kill=1)
    where, env = _armed(tmp_path, "before-manifest@15", once=False)
    killer = Killer(where, "wf-kill2", times=2)
    killer.start()
    paths = run_paths("wf-kill2", runs_root)
    try:
        r = LocalRunner(paths, spec, RunOptions(env=env)).run()
    finally:
        killer.done.set()
    assert len(killer.kills) == 2
    assert (r["status"], r["exit_code"]) == ("lost", 137)  # killed: burst.endings
    assert r["failure"]["step"] == "train"
    train = {s["name"]: s for s in r["steps"]}["train"]
    assert [a["exit_code"] for a in train["attempt_details"]] == [137, 137]
    assert r["workflow"]["phase"] == "Failed"
    statuses = {s["name"]: s["status"] for s in r["steps"]}
    assert statuses["teardown"] == "succeeded"
    assert r["resources_remaining"] == 0
    doc = _docs(paths, "provision")
    assert doc["recovery"]["restarts"] == 1 and doc["recovery"]["may_restart"] is False


def _pids_of_run(run_id: str) -> dict[str, list[int]]:
    """This run's train processes: ``step`` (the step's main process, a child of this
    runner), ``rank1`` (the rank with RANK=1)."""
    found: dict[str, list[int]] = {"step": [], "rank1": []}
    for pid in _train_pids(run_id):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(") ", 1)[1].split()[1]) == os.getpid():
            found["step"].append(pid)
        elif b"RANK=1" in environ and b"LOCAL_RANK=1" in environ:
            found["rank1"].append(pid)
    return found


@pytest.mark.parametrize(
    ("target", "codes"),
    [
        ("step", [137, 0]),  # the step (torchrun's parent) killed: restarted, bounded
        ("rank1", [75, 0]),  # a rank killed: the step exits 75, retried in place
    ],
)
def test_a_kill_in_a_two_rank_train_step_ends_succeeded(
    runs_root: Path, spec: Path, tmp_path: Path, target: str, codes: list[int]
) -> None:
    """Two ranks under torchrun; rank 0's checkpoint writer is held before it commits the
    fourth checkpoint (step 20; step 10 is the last full one committed), then the test
    SIGKILLs the train step's main process or rank 1. The run ends succeeded, resuming from
    step 10; nothing of the killed attempt outlives it (the local pod ends like a
    container)."""
    doc = yaml.safe_load(spec.read_text())
    doc["training"]["processes_per_node"] = 2
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    where = tmp_path / "pause"
    where.mkdir()
    env = {
        "BURST_CHECKPOINT_FAULT": "before-global:4",
        "BURST_CHECKPOINT_FAULT_RANK": "0",
        "BURST_CHECKPOINT_FAULT_ACTION": f"pause:{where}",
        "BURST_CHECKPOINT_FAULT_ONCE": str(where / "fired"),
    }
    run_id = f"wf-ranks-{target}"
    kills: list[int] = []
    done = threading.Event()

    def kill() -> None:
        deadline = time.monotonic() + 540
        while not kills and time.monotonic() < deadline and not done.wait(0.05):
            if (where / "paused").exists() and (pids := _pids_of_run(run_id)[target]):
                for pid in pids:
                    os.kill(pid, signal.SIGKILL)
                kills.extend(pids)

    killer = threading.Thread(target=kill, daemon=True)
    killer.start()
    paths = run_paths(run_id, runs_root)
    try:
        r = LocalRunner(paths, spec, RunOptions(env=env)).run()
    finally:
        done.set()
    assert kills, "the train step's processes were not found"
    assert r["status"] == "succeeded", r["failure"]
    train = {s["name"]: s for s in r["steps"]}["train"]
    assert [a["exit_code"] for a in train["attempt_details"]] == codes
    assert _docs(paths, "train")["resumed_from"] == 10
    assert r["world_size"] == 2  # what the report (and its first screen) says of the ranks
    assert r["resources_remaining"] == 0
    if target == "step":  # killed from outside (137): restarted in the same placement
        assert train["placements"] == 2
        doc = _docs(paths, "provision")
        assert doc["recovery"]["event"] == "restart" and doc["recovery"]["restarts"] == 1
        assert doc["recovery"]["history"][0]["region"] == doc["candidate"]["region"]
        # the killed attempt's record, left open, was closed by the next attempt as the
        # failure it was: the report's sources and its recovery split both count it
        assert r["recovery_sources"] == {"failure": 1}
        (restart,) = r["recovery_split"]["restarts"]
        assert restart["recovery_source"] == "failure" and restart["gap_s"] is not None
