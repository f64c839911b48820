"""Refusals name the way on (issue 29): a preflight that allows nothing says what would change
a review (a sign-off file, and the docs section on writing one) or a deny (other regions or
providers, the rules' section). Before: "no candidate of SPEC is allowed (exit 3)" alone."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from pathlib import Path

Cli = Callable[..., subprocess.CompletedProcess[str]]
REPO = Path(__file__).resolve().parents[2]


def _anchors(doc: Path) -> set[str]:
    """GitHub's heading anchors of a Markdown file."""
    out = set()
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out


def _check_anchors(text: str) -> None:
    for path, anchor in re.findall(r"(docs/[\w.-]+\.md)#([\w-]+)", text):
        assert anchor in _anchors(REPO / path), f"{path}#{anchor} is not a heading"


def test_a_review_names_the_sign_off_file_and_how(burst_cli: Cli, tmp_path: Path) -> None:
    spec = tmp_path / "other.yaml"
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    spec.write_text(text.replace("name: Example Labs Pte Ltd", "name: Other Org Ltd"))
    proc = burst_cli(["preflight", str(spec)])
    assert proc.returncode == 3
    line = proc.stderr.strip().splitlines()[-1]
    assert "policies/exceptions/<id>.yaml" in line
    assert "docs/policy.md#how-a-compliance-officer-writes-one" in line
    assert "next: a review becomes allow" in proc.stdout
    _check_anchors(line)


def test_a_deny_names_what_would_change_it(burst_cli: Cli) -> None:
    proc = burst_cli(["preflight", str(REPO / "examples" / "denied.yaml")])
    assert proc.returncode == 3
    line = proc.stderr.strip().splitlines()[-1]
    assert "a deny is never waived" in line and "compute.regions" in line
    assert "docs/policy.md#the-rules" in line
    _check_anchors(line)
