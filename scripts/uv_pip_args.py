"""Print the ``uv pip install`` options that carry pip's own configuration (``pip config
list``: the files and PIP_* variables pip reads): index-url, extra-index-url and find-links.
uv reads none of pip's configuration, and a machine whose pip is pointed at a CPU torch wheel
or a mirror must install from the same places with uv (``make setup``). A ``file://`` index
or folder that does not exist is left out, as pip leaves it out with a warning."""

from __future__ import annotations

import ast
import shlex
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

OPTIONS = {"index-url": "--index-url", "extra-index-url": "--extra-index-url",
           "find-links": "--find-links"}  # fmt: skip
# as pip ranks them: a PIP_* variable over the [install] section over [global]
RANK = {":env:": 3, "install": 2, "global": 1}


def _exists(location: str) -> bool:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path).exists()
    return parsed.scheme != "" or Path(location).exists()


def uv_args(pip_config: str) -> list[str]:
    """``pip config list`` output -> uv options; a PIP_* variable (``:env:``) wins over a
    file's ``[install]`` section, which wins over its ``[global]`` one."""
    values: dict[str, tuple[int, str]] = {}  # option -> (its source's rank, value)
    for line in pip_config.splitlines():
        key, sep, raw = line.partition("=")
        scope, _, name = key.rpartition(".")
        rank = RANK.get(scope, 0)
        if sep and name in OPTIONS and rank > values.get(name, (0, ""))[0]:
            values[name] = (rank, ast.literal_eval(raw))
    args: list[str] = []
    for name, flag in OPTIONS.items():
        for location in values.get(name, (0, ""))[1].split():
            if _exists(location):
                args += [flag, location]
    return args


def main() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    ).stdout
    print(shlex.join(uv_args(out)))


if __name__ == "__main__":
    main()
