"""Every `burst` command and option that README.md and docs/ name in code (inline code spans
and fenced blocks) is one the CLI accepts (issue 29: the docs had drifted from --help). The
CI templates are checked by tests/ci_templates/test_commands_exist.py."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import click
import pytest

from burst.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
SPAN = re.compile(r"`([^`\n]+)`")
CALL = re.compile(r"(?<![\w/.$-])burst ((?:[a-z][a-z-]*)(?: [^\n|;&)>`]*)?)")


def code_of(text: str) -> list[str]:
    """The code in a Markdown text: fenced blocks (lines joined at a trailing backslash),
    then inline spans outside them."""
    blocks = [b.replace("\\\n", " ") for b in FENCE.findall(text)]
    prose = FENCE.sub("", text)
    return blocks + SPAN.findall(prose)


COMMENT = re.compile(r"(^|\s)#.*$", re.M)  # a shell comment is prose


def calls_in(path: Path) -> list[str]:
    codes = [COMMENT.sub("", c) for c in code_of(path.read_text(encoding="utf-8"))]
    return [m.group(1) for code in codes for m in CALL.finditer(code)]


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help", "-h"}


def problems_in(path: Path) -> list[str]:
    out = []
    for call in calls_in(path):
        try:
            words = shlex.split(call, posix=True)
        except ValueError:
            words = call.split()
        name = words[0]
        if name not in cli.commands:
            out.append(f"{path.name}: burst {name}: no such command")
            continue
        cmd: click.Command = cli.commands[name]
        rest = words[1:]
        while isinstance(cmd, click.Group) and rest and rest[0] in cmd.commands:
            cmd, rest = cmd.commands[rest[0]], rest[1:]
        allowed = _options(cmd) | _options(cli)
        if any(not w.startswith("-") for w in rest) and "..." not in rest:
            # a call written out with its arguments: it must name every required option
            for p in cmd.params:
                if isinstance(p, click.Option) and p.required and not set(p.opts) & set(rest):
                    out.append(f"{path.name}: burst {call.split(' -')[0]}: needs {p.opts[0]}")
        for word in rest:
            if word.startswith("--"):
                flag = word.split("=", 1)[0].rstrip(".,:")
                if flag not in allowed:
                    out.append(f"{path.name}: burst {name} {flag}: no such option")
    return out


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_command_and_option_in_the_docs_exists(path: Path) -> None:
    assert problems_in(path) == []


def test_the_check_can_fail(tmp_path: Path) -> None:
    doc = tmp_path / "x.md"
    doc.write_text(
        "Run `burst plan SPEC --no-such-flag` or `burst image verify REF`\n"
        "```\nburst frobnicate\n```\n"
    )
    assert problems_in(doc) == [
        "x.md: burst frobnicate: no such command",
        "x.md: burst plan --no-such-flag: no such option",
        "x.md: burst image verify REF: needs --key",
    ]


def test_the_docs_name_commands() -> None:
    assert sum(len(calls_in(p)) for p in DOCS) > 50  # the pattern is not stale
