"""The wheel installs the ``burst`` package only (issue 46, "Packaging": it installed top-level
packages named ``steps`` and ``pipelines`` into site-packages, generic names that collide with
other projects). Checked where the wheel's package list comes from: pyproject.toml's package
discovery, run by setuptools' own finder over this checkout (the wheel test in
test_wheel_install.py builds and installs one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

from setuptools import find_packages

REPO = Path(__file__).resolve().parents[2]


def test_every_installed_package_is_under_burst() -> None:
    find = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    include = find["packages"]["find"]["include"]
    packages = find_packages(where=str(REPO), include=include)
    assert "burst" in packages and "burst.steps" in packages and "burst.pipelines" in packages
    outside = sorted({p.split(".")[0] for p in packages} - {"burst"})
    assert outside == [], outside
    # and no top-level package of those names is left in the checkout to be found later
    for name in ("steps", "pipelines"):
        assert not (REPO / name / "__init__.py").exists(), name
