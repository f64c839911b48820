"""Entry point of the ``burst`` console script.

Every module in ``burst.cli.commands`` that defines ``command`` (a click command or group) is
registered automatically, so adding a command is adding a file. Heavy imports belong inside
the command functions, so ``burst --help`` stays fast.

At this edge, and only here, a ``BurstError`` becomes one line on stderr and its exit code.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
import sys
from typing import Any

import click

from burst import __version__
from burst.errors import EXIT_BAD_INPUT, EXIT_CODES, EXIT_FAILURE, BurstError
from burst.obs.logs import setup_logging
from burst.settings import Settings, use

log = logging.getLogger("burst.cli")

EPILOG = "Exit codes: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items())


class BurstGroup(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BurstError as exc:
            click.echo(f"burst: error: {exc.one_line()}", err=True)
            ctx.exit(exc.exit_code)
        except click.UsageError as exc:  # a bad argument: one line, exit 2 (not the usage)
            where = exc.ctx.command_path if exc.ctx is not None else "burst"
            message = " ".join(exc.format_message().split())
            click.echo(f"{where}: error: {message} (see {where} --help)", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt:
            click.echo("burst: interrupted", err=True)
            ctx.exit(130)

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_paragraph()
        with formatter.indentation():
            formatter.write_text("Exit codes:")
            for code, text in EXIT_CODES.items():
                formatter.write_text(f"  {code:>3}  {text}")


@click.group(cls=BurstGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="burst")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug).")
@click.option("--log-json", is_flag=True, help="Logs as JSON lines (or set BURST_LOG_JSON=1).")
def cli(verbose: int, log_json: bool) -> None:
    """burst: train on rented, scarce GPUs abroad, safely and routinely.

    A run is one pipeline: preflight, plan, verify-image, provision, train, and teardown
    (always). `burst run SPEC` runs it on this machine on embedded defaults.
    """
    ctx = click.get_current_context()
    # the environment, read once for the whole command (burst.settings)
    ctx.with_resource(use(Settings.from_env()))
    level = logging.WARNING - 10 * verbose
    setup_logging(level=max(level, logging.DEBUG), json_lines=True if log_json else None)


def _register() -> None:
    from burst.cli import commands

    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        cmd = getattr(module, "command", None)
        if isinstance(cmd, click.Command):
            cli.add_command(cmd)


_register()


def main() -> None:
    try:
        cli.main(prog_name="burst", standalone_mode=True)
    except BurstError as exc:  # raised outside a command (should not happen, but never trace)
        click.echo(f"burst: error: {exc.one_line()}", err=True)
        sys.exit(exc.exit_code)
    except Exception as exc:
        log.debug("unexpected error", exc_info=True)
        click.echo(f"burst: unexpected error: {exc.__class__.__name__}: {exc}", err=True)
        sys.exit(EXIT_FAILURE)


if __name__ == "__main__":
    main()
