"""A dead driver is noticed in minutes, not at the run's expiry (issue 16).

The runner is SIGKILLed while train runs. Its orphaned train step sees the driver heartbeat
lapse, saves and stops by itself; its own heartbeat then lapses too, and `burst reap --yes`,
run as its schedule would (every half second here, with an 8 s lease), destroys the run on
its first pass after that, never while the trainer still renews its heartbeat, and without
`--now`. Then `burst resume` carries the run on from the newest committed checkpoint.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from burst.infra.terraform import count_state_resources
from burst.lease import TRAINER_KEY
from tests.conftest import BurstCli

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# every step held 20 ms: the orphan cannot finish its 1500 steps (30 s) before the 8 s driver
# heartbeat lapses, however fast the machine
LEASE = {"BURST_LEASE_TTL_S": "8", "BURST_STEP_PACE_S": "0.02"}


def _reap(burst_cli: BurstCli, runs_root: Path) -> dict:  # type: ignore[type-arg]
    """One pass of the reaper, in this process (a pass every half second: an interpreter
    start-up each would cost more than the pass)."""
    proc = burst_cli(["reap", "--yes", "--json", "--runs-root", str(runs_root)], env=LEASE)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)  # type: ignore[no-any-return]


def _trainer_records(store: Path) -> list[dict]:  # type: ignore[type-arg]
    folder = store / "train" / "attempts"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))]


def test_runner_killed_during_train_is_reaped_after_its_heartbeats_lapse(
    runs_root: Path, tmp_path: Path, quickstart_in: Path, burst_cmd: list[str], burst_cli: BurstCli
) -> None:
    spec = tmp_path / "long.yaml"
    spec.write_text(
        quickstart_in.read_text()
        .replace("  steps: 30\n", "  steps: 1500\n")
        .replace("interval_steps: 5", "interval_steps: 500")
    )
    env = {**os.environ, **LEASE}
    runner = subprocess.Popen(
        [*burst_cmd, "run", str(spec), "--run-id", "dd"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    lease = tmp_path / "store" / "dd" / TRAINER_KEY
    end = time.monotonic() + 300
    while not lease.exists():
        assert runner.poll() is None and time.monotonic() < end, "train never started"
        time.sleep(0.1)
    runner.send_signal(signal.SIGKILL)  # the driver dies; the train step is orphaned
    runner.wait()
    state = runs_root / "dd" / "terraform" / "terraform.tfstate"
    assert count_state_resources(state) > 0

    verdicts: list[str] = []
    for n in range(200):  # the reaper's schedule, compressed: at once, then every 0.5 s
        doc = _reap(burst_cli, runs_root)
        if n == 0:  # the orphan still trains: resuming now is refused, in one line
            refused = subprocess.run(
                [*burst_cmd, "resume", "dd", "--runs-root", str(runs_root)],
                capture_output=True,
                text=True,
                env=env,
            )
            assert refused.returncode == 3, refused.stderr
            assert refused.stderr.strip().count("\n") == 0, refused.stderr
            assert "run dd is live" in refused.stderr
        verdicts += [r["verdict"] for r in doc["runs"] if r["run_id"] == "dd"]
        if doc["actions"]:
            break
        time.sleep(0.5)
    assert [a["action"] for a in doc["actions"]] == ["destroy-from-state"], verdicts
    assert count_state_resources(state) == 0
    # left alone while a live trainer renewed the heartbeat; destroyed on the first pass
    # that found every heartbeat lapsed
    assert verdicts[0] == "live" and verdicts[-1] == "lapsed", verdicts
    assert verdicts.count("lapsed") == 1 and set(verdicts) == {"live", "lapsed"}, verdicts
    records = _trainer_records(tmp_path / "store" / "dd")
    assert records[-1]["outcome"] == "preempted"
    assert records[-1]["notice"]["source"] == "driver-lost"
    stopped_at = records[-1]["ended_at_step"]
    assert stopped_at < 1500

    # the run is not live any more: resume takes it over and finishes it (its steps unpaced:
    # the pace only kept the orphan training past the driver's lapse)
    proc = subprocess.run(
        [*burst_cmd, "resume", "dd", "--runs-root", str(runs_root)],
        capture_output=True,
        text=True,
        env={**env, "BURST_STEP_PACE_S": "0"},
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads((runs_root / "dd" / "report.json").read_text())
    assert report["final_step"] == 1500
    assert report["attempts"][0]["outcome"] == "preempted"
    assert report["attempts"][-1]["resumed_from"] <= stopped_at
    assert report["resources_remaining"] == 0
