"""Build hook: the wheel carries the shipped policies/ and terraform/ trees.

They live at the top of the repository (where a user edits them) and are not Python
packages; ``build_py`` copies them into the wheel as ``burst/_shipped/{policies,terraform}``,
where :mod:`burst.checkout` finds them in an installed burst. A checkout (and an editable
install) uses the repository's own. Everything else is in pyproject.toml.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("policies", "terraform")
SKIP_DIRS = {".terraform", "__pycache__"}
SKIP_SUFFIXES = (".tfstate", ".tfstate.backup", ".pyc")


class BuildWithShippedTrees(build_py):
    def run(self) -> None:
        super().run()
        root = Path(__file__).resolve().parent
        for name in SHIPPED:
            src = root / name
            dst = Path(self.build_lib) / "burst" / "_shipped" / name
            if dst.exists():
                shutil.rmtree(dst)
            for path in sorted(src.rglob("*")):
                rel = path.relative_to(src)
                if any(part in SKIP_DIRS for part in rel.parts) or path.name.endswith(
                    SKIP_SUFFIXES
                ):
                    continue
                if path.is_file():
                    (dst / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, dst / rel)


setup(cmdclass={"build_py": BuildWithShippedTrees})
