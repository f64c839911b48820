"""Young/Daly per checkpoint tier (burst.plan.interval.tier_intervals) and what `burst plan`
reports of it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from burst.plan.interval import both_lost_mtbf_s, tier_intervals, young_daly
from tests.conftest import BurstCli

REPO = Path(__file__).resolve().parents[2]


def test_each_tier_gets_young_daly_from_its_own_cost_and_failure_rate() -> None:
    node_mtbf = 10 * 3600.0
    job_mtbf = node_mtbf / 4
    t = tier_intervals(2.0, job_mtbf, node_mtbf, replicate_s=5.0, upload_s=60.0, step_s=1.0)
    assert t.memory.interval_s == pytest.approx(young_daly(2.0, job_mtbf))
    both = job_mtbf / -math.expm1(-t.memory.interval_s / node_mtbf)
    assert t.both_lost_mtbf_s == pytest.approx(both)
    assert t.store.interval_s == pytest.approx(young_daly(2.0, both))
    assert t.store.interval_s > 10 * t.memory.interval_s
    assert t.store_every == math.floor(t.store.interval_s / t.memory.interval_s)
    # the floors: the memory tier never checkpoints faster than the copy to the peer...
    slow_copy = tier_intervals(2.0, job_mtbf, node_mtbf, replicate_s=500.0, upload_s=60.0)
    assert slow_copy.memory.interval_s == 500.0
    assert "copy to the peer" in slow_copy.memory.reason
    # ...nor the store faster than its upload
    slow_upload = tier_intervals(2.0, job_mtbf, node_mtbf, replicate_s=5.0, upload_s=1e5)
    assert slow_upload.store.interval_s == 1e5
    # one node: no peer on another node, the store takes every save at Young/Daly
    alone = tier_intervals(2.0, job_mtbf, node_mtbf, replicate_s=5.0, upload_s=60.0, peer=False)
    assert alone.store_every == 1
    assert alone.store.interval_s == alone.memory.interval_s == young_daly(2.0, job_mtbf)


def test_the_double_loss_rate_matches_independent_nodes() -> None:
    """Nodes pre-empted as independent Poisson processes (a replacement at once): losses
    of a node whose peer (the next node) is lost within the exposure that follows."""
    rng = np.random.default_rng(7)
    nodes, node_mtbf, exposure, horizon = 4, 100.0, 5.0, 2e6
    times = [
        np.cumsum(rng.exponential(node_mtbf, int(horizon / node_mtbf * 1.2))) for _ in range(nodes)
    ]
    doubles = 0
    for i in range(nodes):
        mine, peer = times[i], times[(i + 1) % nodes]
        mine = mine[mine < horizon]
        nxt = np.searchsorted(peer, mine, side="right")
        doubles += int(np.sum(peer[np.minimum(nxt, len(peer) - 1)] - mine <= exposure))
    predicted = both_lost_mtbf_s(node_mtbf / nodes, node_mtbf, exposure)
    assert horizon / doubles == pytest.approx(predicted, rel=0.1)


def test_burst_plan_shows_both_intervals(tmp_path: Path, burst_cli: BurstCli) -> None:
    spec = (REPO / "examples" / "quickstart.yaml").read_text()
    assert "gpu_count: 8" in spec
    path = tmp_path / "four-nodes.yaml"
    path.write_text(spec.replace("gpu_count: 8", "gpu_count: 32"))  # 4 nodes of 8
    proc = burst_cli(["plan", str(path), "--json"])
    assert proc.returncode == 0, proc.stderr
    top = json.loads(proc.stdout)["candidates"][0]
    assert top["store_every"] > 1
    assert top["store_interval_s"] > top["memory_interval_s"] > 0
    proc = burst_cli(["plan", str(path)])
    assert proc.returncode == 0, proc.stderr
    assert "with memory tiers (#1): memory every" in " ".join(proc.stdout.split())
