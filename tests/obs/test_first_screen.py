"""The report's first screen (issue 29): where the run ran, why there, under which law, from
what image and spec, the loss curve, preemptions with notice-to-exit and restart times, lost
work, and cost planned against actual with emulated hardware labelled; in text, JSON and the
HTML page, checked in headless Chromium. A real preempted two-rank run (torchrun on CPU, gloo)
and the regional run's report (tests/obs/obs_regional.py)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from obs_regional import RUN_ID as REGIONAL_ID
from obs_regional import make_regional_run
from test_obs_html_chromium import _count_near, screenshot

from burst.obs.report_html import CHECKPOINT

pytestmark = pytest.mark.e2e


def _first_screen(img_path: Path, tmp_path: Path, html: Path) -> None:
    """The first 1,000 pixels of the page hold the first-screen table and the loss curve."""
    img = screenshot(html, img_path, tmp_path / "profile")
    top = img.crop((0, 0, img.width, min(img.height, 1000)))
    assert _count_near(top, CHECKPOINT) > 40, "no loss curve on the first screen"
    page = html.read_text()
    assert page.index('id="first-screen"') < page.index('id="timeline"')


@pytest.mark.slow
def test_first_screen_of_a_preempted_two_rank_run(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str], tmp_path: Path
) -> None:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["training"]["processes_per_node"] = 2
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    res = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--preempt-at-step", "7"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    run_id = res.stdout.strip()
    page = tmp_path / "report.html"
    rep = subprocess.run(
        [*burst_cmd, "report", run_id, "--json", "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert rep.returncode == 0, rep.stderr
    o = json.loads(rep.stdout)["overview"]
    where = o["where"]
    assert (where["provider"], where["ranks"], where["emulated"]) == ("aws", 2, True)
    assert where["region"] and where["instance"]
    assert o["why"]["rank"] == 1 and o["why"]["candidates"] >= 2
    assert o["law"]["verdict"] == "allow" and o["law"]["sign_offs"]
    assert o["source"]["image_digest"].startswith("sha256:") and o["source"]["spec_sha256"]
    assert len(o["loss"]) >= 2
    first, second = o["attempts"][:2]
    assert first["outcome"] == "preempted" and first["restart_s"] is not None
    assert first["lost_steps"] is not None and second["resumed_from"] is not None
    assert o["cost"]["emulated"] and "emulated" in o["cost"]["note"]
    text = subprocess.run(
        [*burst_cmd, "report", run_id], capture_output=True, text=True, timeout=120, check=False
    ).stdout
    for head in ("where:", "why:", "law:", "from:", "loss by step:", "attempt 1: preempted"):
        assert head in text, head
    _first_screen(tmp_path / "shot.png", tmp_path, page)


@pytest.mark.slow
def test_first_screen_of_a_regional_run(burst_cli, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "runs"
    make_regional_run(root)
    page = tmp_path / "regional.html"
    proc = burst_cli(
        ["report", REGIONAL_ID, "--runs-root", str(root), "--json", "--html", str(page)]
    )
    assert proc.returncode == 0, proc.stderr
    o = json.loads(proc.stdout)["overview"]
    assert o["where"]["region"] == "ap-southeast-1,me-central-1"
    assert "regional-sync" in o["why"]["note"] and o["loss_by"] == "round"
    _first_screen(tmp_path / "shot.png", tmp_path, page)
