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
    REPO / "pipelines" / "burst_reaper.py",
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
