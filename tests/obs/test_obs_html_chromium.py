"""The HTML report renders in a real headless Chromium (Debian package `chromium`): the
screenshot is not blank and shows the timeline's and the cost chart's colours."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from obs_run import make_run
from PIL import Image

from burst.obs.report_html import CHECKPOINT, COST_COLOURS, PREEMPT, STATUS_COLOURS, render_html
from burst.obs.run_view import load_run

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

APT_LINE = "apt-get update && apt-get install -y chromium"


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    h = hex_colour.lstrip("#")
    return int(h[0:2], 16), int(h[2:4], 16), int(h[4:6], 16)


def screenshot(html_file: Path, png: Path, profile: Path) -> Image.Image:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    assert binary, f"headless Chromium is needed for this test: {APT_LINE}"
    argv = [
        binary,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--window-size=1100,1300",
        f"--screenshot={png}",
        html_file.as_uri(),
    ]
    res = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    assert res.returncode == 0 and png.exists(), res.stderr[-2000:]
    return Image.open(png).convert("RGB")


def _count_near(img: Image.Image, colour: str, tol: int = 12) -> int:
    r0, g0, b0 = _rgb(colour)
    return sum(
        n
        for n, (r, g, b) in img.getcolors(maxcolors=1 << 20) or []
        if abs(r - r0) <= tol and abs(g - g0) <= tol and abs(b - b0) <= tol
    )


@pytest.mark.slow
def test_report_page_renders_in_headless_chromium(runs_root: Path, tmp_path: Path) -> None:
    d = make_run(runs_root)
    page = tmp_path / "report.html"
    page.write_text(render_html(load_run(d)), encoding="utf-8")
    img = screenshot(page, tmp_path / "shot.png", tmp_path / "profile")

    colours = img.getcolors(maxcolors=1 << 20) or []
    total = img.width * img.height
    white = sum(n for n, c in colours if c == (255, 255, 255))
    assert total - white > 0.03 * total, "the screenshot is (nearly) blank"
    assert len(colours) > 50
    # Timeline: succeeded step bars, the preemption marker, checkpoint diamonds.
    assert _count_near(img, STATUS_COLOURS["succeeded"]) > 2000
    assert _count_near(img, PREEMPT) > 40
    assert _count_near(img, CHECKPOINT) > 60
    # Cost chart: compute, egress and storage parts, and the plan's total.
    for comp in ("compute", "egress", "storage", "total"):
        assert _count_near(img, COST_COLOURS[comp]) > 100, comp


@pytest.mark.slow
def test_a_blank_page_fails_the_same_check(tmp_path: Path) -> None:
    """The check above can fail: an empty page is all white."""
    page = tmp_path / "blank.html"
    page.write_text("<!DOCTYPE html><html><body></body></html>", encoding="utf-8")
    img = screenshot(page, tmp_path / "blank.png", tmp_path / "profile")
    colours = img.getcolors(maxcolors=1 << 20) or []
    white = sum(n for n, c in colours if c == (255, 255, 255))
    assert img.width * img.height - white < 0.03 * img.width * img.height
    assert _count_near(img, STATUS_COLOURS["succeeded"]) == 0
