"""The report's first screen (issue 29): where the run ran, why there, under which law, from
what image and spec, the loss curve, preemptions with notice-to-exit and restart times, lost
work, and cost planned against actual with emulated hardware labelled; in text, JSON and the
HTML page, checked in headless Chromium: here the regional run's report
(tests/obs/obs_regional.py); a real preempted run's first screen is checked on the quickstart
run that tests/obs/test_quickstart_runs.py shares (one pipeline fewer), and a two-rank run's
world size in its report by tests/infra/test_recovery_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from obs_regional import RUN_ID as REGIONAL_ID
from obs_regional import make_regional_run
from PIL import Image
from test_obs_html_chromium import _count_near, screenshot

from burst.obs.report_html import CHECKPOINT

pytestmark = pytest.mark.e2e


def first_screen(img: Image.Image, html: Path) -> None:
    """The first 1,000 pixels of the page hold the first-screen table and the loss curve."""
    top = img.crop((0, 0, img.width, min(img.height, 1000)))
    assert _count_near(top, CHECKPOINT) > 40, "no loss curve on the first screen"
    page = html.read_text()
    assert page.index('id="first-screen"') < page.index('id="timeline"')


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
    first_screen(screenshot(page, tmp_path / "shot.png", tmp_path / "profile"), page)
