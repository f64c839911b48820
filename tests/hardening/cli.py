"""Run burst commands in-process (fast) and check the contract for bad input: the exit code,
one line per problem, no traceback."""

from __future__ import annotations

from dataclasses import dataclass

from click.testing import CliRunner

from burst.cli.main import cli

REFUSED = (2, 3)  # bad input, refused by policy


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        return [ln for ln in self.err.splitlines() if ln.strip()]


def burst(*args: str, env: dict[str, str | None] | None = None) -> Outcome:
    result = CliRunner().invoke(cli, list(args), env=env, catch_exceptions=True)
    exc = result.exception
    # anything but a clean exit is what `burst` would print as "unexpected error" (exit 1)
    assert exc is None or isinstance(exc, SystemExit), f"{type(exc).__name__}: {exc}"
    assert "Traceback" not in result.stderr and "unexpected error" not in result.stderr
    return Outcome(result.exit_code, result.stdout, result.stderr)
