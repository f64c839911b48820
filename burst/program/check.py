"""Before anything is rented: does ``training.command`` exist, and does it start?

Nothing of the program's training runs here:

* the first word must name an executable (on PATH, or a path that is an executable file);
  with ``launcher: torchrun`` a first word ending in ``.py`` is the script torchrun runs;
* a Python program (``python train.py``, ``python -m pkg.train``, a ``.py`` script) gets a dry
  import in that interpreter: the script compiles and the modules it imports at top level are
  found (the module of ``-m`` too), none of them executed;
* any other program is started with ``--help`` and must not fail to start (exit 126/127),
  within the same time limit as the entrypoint check (``BURST_ENTRYPOINT_CHECK_S``); one still
  running at the limit has started and is stopped.

Every problem is one ``BadInputError`` line naming ``training.command`` (exit 2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from burst.errors import BadInputError
from burst.inputs import clip
from burst.program.process import interpreted, resolve
from burst.spec import BurstJob

#: run in the program's interpreter: compile the script, find its top-level imports
DRY_IMPORT = r"""
import ast, importlib.util, sys
kind, target = sys.argv[1], sys.argv[2]
if kind == "module":
    names = [target]
else:
    src = open(target, "rb").read()
    tree = compile(src, target, "exec", ast.PyCF_ONLY_AST)
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(target)))
    names = []
    for node in tree.body:
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
missing = []
for name in names:
    try:
        if importlib.util.find_spec(name) is None:
            missing.append(name)
    except (ImportError, ValueError):
        missing.append(name)
if missing:
    print("imports modules that are not installed: " + ", ".join(missing), file=sys.stderr)
    sys.exit(2)
"""


def _fail(message: str) -> BadInputError:
    return BadInputError(f"training.command: {message}")


def python_target(command: list[str], launcher: str) -> tuple[str, str, str] | None:
    """(interpreter, "script"|"module", script path or module) of a Python program."""
    first = command[0]
    if first.endswith(".py"):
        return sys.executable, "script", first
    if Path(first).name.startswith("python") and len(command) > 1:
        if command[1] == "-m" and len(command) > 2:
            return first, "module", command[2]
        if command[1].endswith(".py"):
            return first, "script", command[1]
    return None


def check_command(job: BurstJob, timeout: float) -> None:
    command = interpreted(list(job.training.command or []))
    launcher = job.training.launcher
    first = command[0]
    if first.endswith(".py") and launcher == "torchrun":
        if not Path(first).is_file():
            raise _fail(f"the script {first!r} does not exist (from {os.getcwd()})")
    else:
        exe = resolve(command)
        if exe is None:
            if os.sep in first and Path(first).exists():
                raise _fail(f"{first!r} is not executable (chmod +x, or start it with python)")
            raise _fail(f"{first!r} is not found (not on PATH, nor an executable file)")
    py = python_target(command, launcher)
    if py is not None:
        interpreter, kind, target = py
        if kind == "script" and not Path(target).is_file():
            raise _fail(f"the script {target!r} does not exist (from {os.getcwd()})")
        _run([interpreter, "-c", DRY_IMPORT, kind, target], timeout, f"{target}")
        return
    _run([*command, "--help"], timeout, first, started_is_enough=True)


def _run(argv: list[str], timeout: float, what: str, started_is_enough: bool = False) -> None:
    try:
        proc = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    except subprocess.TimeoutExpired:
        if started_is_enough:
            return
        raise _fail(f"{what}: the dry import did not finish within {timeout:g} s") from None
    except OSError as exc:
        raise _fail(f"{what} does not start: {exc.strerror or exc}") from None
    if started_is_enough:
        if proc.returncode in (126, 127):
            raise _fail(f"{what} does not start (exit {proc.returncode})")
        return
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
        last = lines[-1] if lines else f"exit code {proc.returncode}"
        raise _fail(f"{what}: {clip(last, 300)}")
