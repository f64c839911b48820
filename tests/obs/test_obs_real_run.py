"""End to end on this machine: a real `burst run` of the quickstart, preempted at step 7, then
`burst report` and `burst runs` on what it left behind, and the page in headless Chromium."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from test_obs_html_chromium import _count_near, screenshot

from burst.obs.report_html import PREEMPT, STATUS_COLOURS

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


@pytest.mark.slow
def test_report_of_a_real_preempted_run(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str], tmp_path: Path
) -> None:
    res = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--preempt-at-step", "7"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (run_id,) = [d.name for d in runs_root.iterdir() if (d / "report.json").exists()]

    # the metrics themselves (what Prometheus scrapes or the Pushgateway gets), summed over
    # the train attempts' files: one preemption, every committed checkpoint, labelled
    from burst.obs.metrics import read_metric_files

    files = sorted((runs_root / run_id / "metrics").glob("*.prom"))
    assert {f.name for f in files} >= {"train.prom", "train.2.prom", "provision.prom"}
    m = read_metric_files(files)
    report = json.loads((runs_root / run_id / "report.json").read_text())
    assert m.total("burst_preemptions_total", run_id=run_id, team="ml-research") == 1
    assert m.total("burst_checkpoints_committed_total", run_id=run_id) == report["checkpoints"]
    assert m.total("burst_checkpoint_bytes_count") == report["checkpoints"]
    assert set(m.by_label("burst_checkpoint_bytes_count", "tier")) == {"full", "weights"}
    assert m.total("burst_provision_attempts_total", outcome="ok") == 1
    assert m.total("burst_resources_leaked") == 0

    page = tmp_path / "out.html"
    res = subprocess.run(
        [*burst_cmd, "report", run_id, "--json", "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "succeeded"
    assert s["preemptions"] == 1
    assert s["checkpoints"] >= 2
    assert s["resources_remaining"] == 0
    train = next(st for st in s["steps"] if st["name"] == "train")
    assert train["attempts"] == 2
    pre = [e for e in s["events"] if e["kind"] == "preemption"]
    assert len(pre) == 1 and pre[0]["at"] is not None

    listing = subprocess.run(
        [*burst_cmd, "runs", "--json"], capture_output=True, text=True, timeout=120, check=False
    )
    assert [r["run_id"] for r in json.loads(listing.stdout)] == [run_id]

    img = screenshot(page, tmp_path / "shot.png", tmp_path / "profile")
    assert _count_near(img, STATUS_COLOURS["succeeded"]) > 2000
    assert _count_near(img, PREEMPT) > 40
