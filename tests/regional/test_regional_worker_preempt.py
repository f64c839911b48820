"""A regional worker preempted mid-round saves, exits 75, is retried and rejoins, as an
attempt of burst-train does (issue 25: regional sync is a hook of the one train loop).

Real processes (``python -m steps.regional_worker`` and ``steps.regional_aggregator``, their
``--config`` contract), a real SIGTERM, directory stores (a region's own store each, and the
exchange store). The worker of me-central-1 is held in the middle of round 1 by the named
fault point ``worker-mid-round@me-central-1@1`` (``sleep``) so the signal lands mid-round;
the retried worker resumes from its emergency checkpoint and the run ends with the weights of
a run that was never preempted: the shipped two-region run (``two_regions``, shared with
test_regional_run.py: the same model, seed, steps, H and shards, split by the runner's own
``split_shards``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from burst.documents.regional import RegionalReport
from burst.errors import EXIT_PREEMPTED
from burst.regional.runtime import RoleConfig
from burst.regional.stores import SHARD_KEY
from burst.runner.regions import split_shards
from burst.spec import load_spec
from burst.storage.local import LocalStore

from .regional_specs import TWO_REGIONS_GROUP

pytestmark = [pytest.mark.e2e]

REPO = Path(__file__).resolve().parents[2]
REGIONS = ("ap-southeast-1", "me-central-1")
AGG = "ap-southeast-1"
PREEMPTED = "me-central-1"
H, STEPS, ROUNDS = 4, 12, 3
MID_ROUND = f"worker-mid-round@{PREEMPTED}@1"  # after inner step 2 of round 1 (step 6)


def _spec(tmp: Path) -> Path:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    for old, new in (
        ("name: quickstart", "name: regional-preempt"),
        (
            "  region: ap-southeast-1\n",
            "  region: ap-southeast-1\n  shards: {ap-southeast-1: 0.004, me-central-1: 0.006}\n",
        ),
        ("  steps: 30\n", f"  steps: {STEPS}\n"),
        (
            "  learning_rate: 0.01\n",
            "  learning_rate: 0.01\n  strategy: regional-sync\n  regional_sync:\n"
            f"    local_steps: {H}\n    round_deadline_s: 120\n",
        ),
    ):
        assert old in text, old
        text = text.replace(old, new)
    path = tmp / "spec.yaml"
    path.write_text(text)
    return path


def _shards(tmp: Path, spec: Path) -> None:
    """Each region's part of the example data set, in its own store only, as the local
    runner splits it."""
    for region, (_, shard) in split_shards(load_spec(spec), list(REGIONS)).items():
        LocalStore(tmp / "stores" / region).put_bytes(SHARD_KEY, shard)


def _config(tmp: Path, spec: Path, role: str, region: str, faults: dict[str, str]) -> Path:
    name = f"{role}-{region}"
    cfg = RoleConfig(
        spec=str(spec),
        role=role,
        region=region,
        aggregation_region=AGG,
        regions=REGIONS,
        local_steps=H,
        rounds=ROUNDS,
        region_store=LocalStore(tmp / "stores" / region).spec() if role == "worker" else None,
        exchange_store=LocalStore(tmp / "stores" / "exchange").spec(),
        links=(
            {"a": REGIONS[0], "b": REGIONS[1], "gb_per_s": 1.0, "latency_ms": 0, "usd_per_gb": 0},
        ),
        link_log=str(tmp / "links.jsonl"),
        time_scale=0.0,
        state_dir=str(tmp / "scratch" / name),
        out=str(tmp / f"{name}.json"),
        faults=faults or None,
        wait_limit_s=120.0,
        run_id="preempt",
    )
    path = tmp / f"{name}.config.json"
    path.write_text(cfg.to_json())
    return path


def _start(module: str, config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "BURST_SIGTERM_GRACE_S": "30", "OMP_NUM_THREADS": "1"}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", module, "--config", str(config)],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def _wait_line(log: Path, text: str, proc: subprocess.Popen[bytes], timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        assert proc.poll() is None, f"exited {proc.returncode} before {text!r}: {log.read_text()}"
        assert time.monotonic() < end, f"no {text!r} in {log}"
        time.sleep(0.05)


def _run(tmp: Path, preempt: bool) -> dict[str, Any]:
    tmp.mkdir()
    spec = _spec(tmp)
    _shards(tmp, spec)
    faults = {MID_ROUND: "sleep:3"} if preempt else {}
    cfgs = {r: _config(tmp, spec, "worker", r, faults if r == PREEMPTED else {}) for r in REGIONS}
    agg_cfg = _config(tmp, spec, "aggregator", AGG, {})
    logs = {r: tmp / f"worker-{r}.log" for r in REGIONS}
    agg = _start("steps.regional_aggregator", agg_cfg, tmp / "aggregator.log")
    procs = {r: _start("steps.regional_worker", cfgs[r], logs[r]) for r in REGIONS}
    codes: list[int] = []
    try:
        if preempt:
            victim = procs[PREEMPTED]
            _wait_line(logs[PREEMPTED], f"fault point {MID_ROUND}: sleeping", victim)
            victim.send_signal(signal.SIGTERM)  # mid-round: the notice
            codes.append(victim.wait(timeout=120))
            # requeued: the same worker, the same config (its fault point is behind it)
            procs[PREEMPTED] = _start("steps.regional_worker", cfgs[PREEMPTED], logs[PREEMPTED])
        for r, p in procs.items():
            assert p.wait(timeout=300) == 0, logs[r].read_text()
        assert agg.wait(timeout=300) == 0, (tmp / "aggregator.log").read_text()
    finally:
        for p in [agg, *procs.values()]:
            if p.poll() is None:
                p.kill()
                p.wait()
    train = json.loads((tmp / "scratch" / f"worker-{PREEMPTED}" / "train.json").read_text())
    return {
        "codes": codes,
        "aggregator": json.loads((tmp / f"aggregator-{AGG}.json").read_text()),
        "worker": json.loads((tmp / f"worker-{PREEMPTED}.json").read_text()),
        "train": train,
    }


@pytest.mark.xdist_group(TWO_REGIONS_GROUP)
def test_a_worker_preempted_mid_round_saves_exits_75_and_rejoins(
    tmp_path: Path, two_regions: tuple[Path, dict[str, Any]]
) -> None:
    clean = RegionalReport.model_validate(two_regions[1])
    assert (clean.local_steps, clean.rounds_planned) == (H, ROUNDS)
    hit = _run(tmp_path / "hit", preempt=True)
    assert hit["codes"] == [EXIT_PREEMPTED]
    first, second = hit["train"]["attempts"]
    assert first["outcome"] == "preempted" and first["preempted"] is True
    save = first["emergency_save"]
    assert save["tier"] == "full" and save["committed"] is True, save
    mid = save["committed_step"]
    assert H < mid < 2 * H, f"step {mid} is not inside round 1"  # mid-round, saved
    assert second["outcome"] == "done" and second["resumed_from"] == mid  # resumed there
    # it rejoined: its round-1 delta was accepted, and the run ends as if never preempted
    rounds = hit["aggregator"]["rounds"]
    assert [sorted(r["accepted"]) for r in rounds] == [sorted(REGIONS)] * ROUNDS, rounds
    assert [r["round"] for r in hit["worker"]["rounds"]] == [1, 2]
    assert hit["aggregator"]["final_weights_sha256"] == clean.final_weights_sha256
