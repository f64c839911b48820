"""Real processes, real signals: preempted any number of times at any step, a run ends with
exactly the weights of an uninterrupted run; notices with a deadline lead to the save that fits.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import time
from pathlib import Path

import pytest
from attempts_harness import (
    committed,
    load_checkpoint,
    run_attempt,
    start_attempt,
    write_spec,
)
from metadata_fakes import FakeIMDS
from pytest_httpserver import HTTPServer

from burst.errors import EXIT_PREEMPTED

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _until_done(
    spec: Path, run_id: str, root: Path, env: dict[str, str], max_attempts: int = 8
) -> tuple[list[int], dict]:  # type: ignore[type-arg]
    codes: list[int] = []
    while len(codes) < max_attempts:
        a = run_attempt(spec, run_id, root, env)
        codes.append(a.code)  # type: ignore[arg-type]
        if a.code == 0:
            return codes, a.doc()
        assert a.code == EXIT_PREEMPTED, f"attempt exited {a.code}, not 0 or 75"
    raise AssertionError(f"no success in {max_attempts} attempts: {codes}")


@pytest.fixture(scope="module")
def baseline(tmp_path_factory: pytest.TempPathFactory) -> dict[int, str]:
    """final_weights_sha256 of uninterrupted runs, by step count."""
    out = {}
    for steps in (30, 200):
        tmp = tmp_path_factory.mktemp(f"base{steps}")
        spec = write_spec(tmp, steps=steps)
        codes, doc = _until_done(spec, "base", tmp / "runs", {}, max_attempts=1)
        assert codes == [0] and doc["preemptions"] == 0
        out[steps] = doc["final_weights_sha256"]
    return out


def test_sigterm_at_random_steps_always_resumes_exactly(
    tmp_path: Path, baseline: dict[int, str]
) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    for trial in range(6):
        steps = sorted(rng.sample(range(1, 30), rng.randint(1, 3)))
        tmp = tmp_path / f"t{trial}"
        tmp.mkdir()
        spec = write_spec(tmp, steps=30)
        env = {"BURST_PREEMPT_AT_STEPS": ",".join(map(str, steps))}
        codes, doc = _until_done(spec, f"trial-{trial}", tmp / "runs", env)
        why = f"seed {seed} trial {trial} preempted at {steps}"
        assert codes == [EXIT_PREEMPTED] * len(steps) + [0], why
        assert doc["preemptions"] == len(steps), why
        assert doc["final_weights_sha256"] == baseline[30], why
        # a full emergency checkpoint fits the 30 s grace: each attempt resumes where the
        # previous one was preempted
        assert [a["resumed_from"] for a in doc["attempts"]] == [0, *steps], why
        assert all(a["emergency_save"]["tier"] == "full" for a in doc["attempts"][:-1]), why


def test_sigterm_from_another_process_at_random_moments_resumes_exactly(
    tmp_path: Path, baseline: dict[int, str]
) -> None:
    """The signal lands anywhere: mid-step, mid-checkpoint, even before the handler exists
    (then it kills, like a node loss, and the rerun resumes from the last commit)."""
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    preempted = 0
    for trial in range(6):
        tmp = tmp_path / f"a{trial}"
        tmp.mkdir()
        spec = write_spec(tmp, steps=200, interval=7)
        run_id = f"async-{trial}"
        codes: list[int] = []
        for attempt in range(8):
            a = start_attempt(spec, run_id, tmp / "runs")
            if attempt < 2:
                if rng.random() < 0.8:  # mostly once the watcher is there, else any time
                    a.wait_until_watching()
                time.sleep(rng.uniform(0.0, 0.5))
                with contextlib.suppress(ProcessLookupError):  # it may have finished
                    os.kill(a.pid, signal.SIGTERM)
            codes.append(a.wait())
            if codes[-1] == 0:
                break
            assert codes[-1] in (EXIT_PREEMPTED, -signal.SIGTERM), (seed, trial, codes)
        why = f"seed {seed} trial {trial} exits {codes}"
        assert codes[-1] == 0, why
        doc = a.doc()
        assert doc["final_weights_sha256"] == baseline[200], why
        assert doc["preemptions"] == codes.count(EXIT_PREEMPTED), why
        preempted += codes.count(EXIT_PREEMPTED)
    assert preempted >= 1, f"seed {seed}: no attempt was preempted (all signals missed)"


def test_no_time_for_any_save_exits_75_and_keeps_the_last_checkpoint(
    tmp_path: Path, baseline: dict[int, str]
) -> None:
    spec = write_spec(tmp_path, steps=30)
    root = tmp_path / "runs"
    env = {"BURST_PREEMPT_AT_STEPS": "12", "BURST_SIGTERM_GRACE_S": "0"}
    a = run_attempt(spec, "short", root, env)
    assert a.code == EXIT_PREEMPTED
    doc = a.doc()
    emergency = doc["attempts"][0]["emergency_save"]
    assert emergency["tier"] == "none" and "committed_step" not in emergency
    refs = committed(spec, "short")
    # what was committed stays, nothing at step 12; the full save of step 10 may still have
    # been in flight at the notice (then it committed while the process exited, or not)
    assert [(r.step, r.tier) for r in refs] in ([(5, "weights")], [(5, "weights"), (10, "full")])
    last = emergency["last_committed"]
    assert (last["step"], last["tier"]) in [(r.step, r.tier) for r in refs]
    for ref in refs:
        assert load_checkpoint(spec, "short", ref)["step"] == ref.step  # intact: verified
    fulls = [r.step for r in refs if r.tier == "full"]
    a = run_attempt(spec, "short", root, env)
    assert a.code == 0
    doc = a.doc()
    assert doc["resumed_from"] == max(fulls, default=0) and doc["preemptions"] == 1
    assert doc["final_weights_sha256"] == baseline[30]


@pytest.mark.parametrize(("announce_in", "tier"), [(6.0, "full"), (-5.0, "none")])
def test_imds_stop_notice_leads_to_the_save_that_fits_then_exit_75(
    tmp_path: Path, httpserver: HTTPServer, announce_in: float, tier: str
) -> None:
    """AWS announces a stop 120 s ahead; scaled down 20x here to 6 s. A stop announced for a
    time already past leaves no time for any save."""
    imds = FakeIMDS(httpserver)
    spec = write_spec(tmp_path, steps=5000, interval=50)
    env = {
        "BURST_PREEMPT_WATCHERS": "aws",
        "BURST_AWS_IMDS_URL": imds.url,
        "BURST_PREEMPT_POLL_S": "0.1",
    }
    a = start_attempt(spec, "imds", tmp_path / "runs", env)
    end = time.monotonic() + 120
    while not committed(spec, "imds") and time.monotonic() < end:
        time.sleep(0.05)
    before = committed(spec, "imds")
    assert before, "no checkpoint committed before the notice"
    announced = imds.announce_stop(announce_in)
    assert a.wait() == EXIT_PREEMPTED
    doc = a.doc()
    att = doc["attempts"][-1]
    assert att["preempted"] and att["notice"]["source"] == "aws-spot-terminate"
    deadline = att["notice"]["deadline"]
    assert time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(deadline)) == announced
    emergency = att["emergency_save"]
    assert emergency["tier"] == tier
    refs = committed(spec, "imds")
    last = refs[-1]
    noted = emergency["last_committed"]
    assert (noted["step"], noted["tier"]) in [(r.step, r.tier) for r in refs]
    for ref in refs:
        assert load_checkpoint(spec, "imds", ref)["step"] == ref.step  # intact: verified
    if tier == "full":
        assert noted == {"step": last.step, "tier": last.tier}
        assert emergency["committed_step"] == last.step == att["ended_at_step"]
        assert emergency["before_deadline"] and emergency["committed_at"] <= deadline
        assert last.step not in [r.step for r in before]
    else:
        assert att["ended_at_step"] > last.step  # the steps since the last commit are lost
        assert "committed_step" not in emergency


def test_rebalance_recommendation_checkpoints_early_and_carries_on(
    tmp_path: Path, httpserver: HTTPServer
) -> None:
    imds = FakeIMDS(httpserver)
    imds.rebalance = {"noticeTime": "2026-11-22T00:00:00Z"}
    env = {
        "BURST_PREEMPT_WATCHERS": "aws",
        "BURST_AWS_IMDS_URL": imds.url,
        "BURST_PREEMPT_POLL_S": "0.1",
    }
    spec = write_spec(tmp_path, steps=200, interval=100)
    plain = run_attempt(spec, "plain", tmp_path / "runs")
    a = run_attempt(spec, "rebalance", tmp_path / "runs", env)
    assert plain.code == 0 and a.code == 0
    doc, base = a.doc(), plain.doc()
    (att,) = doc["attempts"]
    assert not att["preempted"] and [n["source"] for n in att["advisories"]] == ["aws-rebalance"]
    at = att["advisories"][0]["at_step"]
    extra = 0 if at % 100 == 0 else 1  # on a scheduled step, the scheduled save is the one
    assert doc["checkpoints"] == base["checkpoints"] + extra
    assert doc["final_weights_sha256"] == base["final_weights_sha256"]


def test_sigterm_to_the_whole_process_group_still_commits_the_emergency_save(
    tmp_path: Path,
) -> None:
    """A terminal's Ctrl-C or an init that signals the group reaches the background checkpoint
    writer too: it must live on to commit the emergency save."""
    spec = write_spec(tmp_path, steps=5000, interval=50)
    a = start_attempt(spec, "group", tmp_path / "runs", own_group=True)
    end = time.monotonic() + 120
    while not committed(spec, "group") and time.monotonic() < end:
        time.sleep(0.05)

    # the writer: a child of any of the trainer's threads. A full save larger than the buffer
    # replaces the worker (a new buffer, a new worker), so wait until exactly one is alive.
    def writers() -> list[int]:
        found = []
        for task in Path(f"/proc/{a.pid}/task").iterdir():
            try:
                kids = (task / "children").read_text().split()
            except OSError:  # the thread ended meanwhile
                continue
            for p in kids:
                try:
                    if b"burst.checkpoint.worker" in Path(f"/proc/{p}/cmdline").read_bytes():
                        found.append(int(p))
                except OSError:
                    continue
        return found

    end = time.monotonic() + 30
    while len(found := writers()) != 1 and time.monotonic() < end:
        time.sleep(0.05)
    (writer,) = found
    # a signal to the trainer's group must not reach it: it runs in a session of its own, or
    # holds the signals blocked
    status = Path(f"/proc/{writer}/status").read_text()
    blocked = int(next(ln for ln in status.splitlines() if ln.startswith("SigBlk:")).split()[1], 16)
    holds = all(blocked & (1 << (sig - 1)) for sig in (signal.SIGTERM, signal.SIGINT))
    assert os.getpgid(writer) != a.pid or holds, "the group's SIGTERM would kill the writer"
    os.killpg(a.pid, signal.SIGTERM)
    assert a.wait() == EXIT_PREEMPTED
    att = a.doc()["attempts"][-1]
    emergency = att["emergency_save"]
    assert emergency["tier"] == "full" and emergency["committed"], emergency
    last = committed(spec, "group")[-1]
    assert (last.step, last.tier) == (att["ended_at_step"], "full")
    assert load_checkpoint(spec, "group", last)["step"] == last.step


def test_a_notice_standing_at_start_exits_75_and_the_run_still_ends_exactly(
    tmp_path: Path, httpserver: HTTPServer, baseline: dict[int, str]
) -> None:
    """The node is already being reclaimed when the attempt starts: it saves what fits at the
    first step boundary it reaches and leaves; the next attempt, elsewhere, finishes."""
    imds = FakeIMDS(httpserver)
    imds.announce_stop(120)
    spec = write_spec(tmp_path, steps=30)
    env = {
        "BURST_PREEMPT_WATCHERS": "aws",
        "BURST_AWS_IMDS_URL": imds.url,
        "BURST_PREEMPT_POLL_S": "0.1",
    }
    first = run_attempt(spec, "standing", tmp_path / "runs", env)
    assert first.code == EXIT_PREEMPTED
    att = first.doc()["attempts"][0]
    assert att["notice"]["source"] == "aws-spot-terminate"
    assert att["emergency_save"]["tier"] == "full" and att["emergency_save"]["committed"]
    second = run_attempt(spec, "standing", tmp_path / "runs")
    assert second.code == 0
    doc = second.doc()
    assert doc["resumed_from"] == att["ended_at_step"] and doc["preemptions"] == 1
    assert doc["final_weights_sha256"] == baseline[30]
