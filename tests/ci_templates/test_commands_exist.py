"""Every `burst` command line the CI templates (and docs/cluster-setup.md) run names a command
and options the installed CLI accepts: the templates are copied into users' repositories and
drift silently when a command changes (click parses the options: an unknown one is exit 2)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from burst.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
SOURCES = [
    *sorted((REPO / "ci").rglob("*.yml")),
    REPO / "docs" / "cluster-setup.md",
    REPO / "burst" / "pipelines" / "burst_reaper.py",
]
CALL = re.compile(r"(?<![\w/.-])burst ((?:[a-z][a-z-]*)(?: [^\n|;&)>'`]*)?)")


def _calls(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8").replace("\\\n", " ")
    return [m.group(1) for m in CALL.finditer(text)]


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_burst_call_is_accepted(path: Path) -> None:
    calls = _calls(path)
    problems = []
    for call in calls:
        try:
            words = shlex.split(call, posix=True)
        except ValueError:
            words = call.split()
        name = words[0]
        if name not in cli.commands:
            continue  # prose ("burst jobs"), not a call
        cmd: click.Command = cli.commands[name]
        rest = words[1:]
        while isinstance(cmd, click.Group) and rest and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        allowed = _options(cmd)
        for word in rest:
            if word.startswith("--"):
                flag = word.split("=", 1)[0]
                if flag not in allowed:
                    problems.append(f"{path.name}: burst {name} {flag}: no such option")
    assert calls, f"{path.name}: no burst calls found (the pattern is stale)"
    assert problems == []


MODULE_CALL = re.compile(r"python3? -m ([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)")
#: modules of tools, not of this checkout, that a doc may show (pip installs, a venv)
NOT_OURS = {"pip", "venv", "ensurepip"}


def test_every_python_module_the_templates_and_docs_run_exists() -> None:
    """`python -m X` in the CI templates, the compiled templates, the Dockerfiles and the docs
    names a module this checkout has (the steps moved under burst/: a copied template that
    still ran `python -m steps.teardown` would fail at the end of every run)."""
    import importlib.util

    sources = [
        *SOURCES,
        *sorted((REPO / "burst" / "pipelines" / "compiled").glob("*.yaml")),
        *sorted((REPO / "images").rglob("Dockerfile")),
        *sorted((REPO / "docs").rglob("*.md")),
        REPO / "README.md",
    ]
    missing = []
    for path in sources:
        for module in MODULE_CALL.findall(path.read_text(encoding="utf-8")):
            if module.split(".")[0] in NOT_OURS:
                continue
            try:
                found = importlib.util.find_spec(module) is not None
            except ModuleNotFoundError:
                found = False
            if not found:
                missing.append(f"{path.relative_to(REPO)}: python -m {module}")
    assert not missing, missing
