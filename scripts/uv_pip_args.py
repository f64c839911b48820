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


def _exists(location: str) -> bool:
    parsed = urlparse(location)
    if parsed.scheme == "file":
        return Path(parsed.path).exists()
    return parsed.scheme != "" or Path(location).exists()


def uv_args(pip_config: str) -> list[str]:
    """``pip config list`` output -> uv options; a PIP_* variable (``:env:``) wins over a file."""
    values: dict[str, str] = {}
    for line in pip_config.splitlines():
        key, sep, raw = line.partition("=")
        if not sep:
            continue
        scope, _, name = key.rpartition(".")
        if name not in OPTIONS or scope not in (":env:", "global", "install"):
            continue
        if scope != "global" or name not in values:  # a variable or install section wins
            values[name] = ast.literal_eval(raw)
    args: list[str] = []
    for name, flag in OPTIONS.items():
        for location in values.get(name, "").split():
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
