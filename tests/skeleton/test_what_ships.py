"""What ships is what runs: the installed package (burst: its steps and pipelines included) never imports the
development tools in devtools/ (checks and builders run from a checkout), and pyproject.toml
does not install them."""

from __future__ import annotations

import re
import tomllib
from fnmatch import fnmatch
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHIPPED = ("burst",)
IMPORTS_DEVTOOLS = re.compile(r"^\s*(from|import)\s+devtools\b", re.MULTILINE)


def test_shipped_code_does_not_import_devtools() -> None:
    offenders = [
        str(p.relative_to(REPO))
        for package in SHIPPED
        for p in (REPO / package).rglob("*.py")
        if IMPORTS_DEVTOOLS.search(p.read_text(encoding="utf-8"))
    ]
    assert offenders == []


def test_devtools_are_not_installed() -> None:
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    include = config["tool"]["setuptools"]["packages"]["find"]["include"]
    assert all(any(fnmatch(p, pat) for pat in include) for p in SHIPPED)
    assert not any(fnmatch("devtools", pat) for pat in include)
    assert (REPO / "devtools" / "hclcheck.py").is_file()
