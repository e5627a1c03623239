"""The click layer: parse options, call the library, write the results.

``popliner PROFILE [options]`` is the main command; further verbs
(``simulate``, ``check``, ``synth``, ``export``) are subcommands. Each
subcommand lives in its own module exposing ``command`` and is imported only
when used. This module is the one place where :class:`PoplinerError` turns
into a one-line message and an exit code.
"""

from __future__ import annotations

import importlib
import logging
import sys
from typing import Any

import click

from popliner import __version__
from popliner.errors import PoplinerError

__all__ = ["cli", "main"]

#: subcommand name -> module holding ``command``
SUBCOMMANDS: dict[str, str] = {
    "analyse": "popliner.cli.analyse",
    "cache": "popliner.cli.cache",
    "check": "popliner.cli.check",
    "export": "popliner.cli.export",
    "simulate": "popliner.cli.simulate",
    "synth": "popliner.cli.synth",
}
DEFAULT_COMMAND = "analyse"


class PoplinerFailure(click.ClickException):
    """A library error on its way out: one line on stderr, the error's exit code."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code

    def show(self, file: Any = None) -> None:
        click.echo(f"popliner: error: {self.format_message()}", err=True)


def translate_errors(invoke: Any) -> Any:
    """Run ``invoke`` turning library exceptions into :class:`PoplinerFailure`."""
    try:
        return invoke()
    except PoplinerError as exc:
        raise PoplinerFailure(str(exc), exc.exit_code) from None
    except KeyboardInterrupt:
        raise PoplinerFailure("interrupted; no partial output file was left behind", 130) from None
    except MemoryError:
        raise PoplinerFailure("out of memory; try a smaller profile or fewer outputs at once", 2) from None


class PoplinerGroup(click.Group):
    """A group whose first argument may be a profile instead of a verb.

    ``popliner model.json --solve`` runs the default command (``analyse``);
    ``popliner simulate cfg.yaml`` runs a subcommand. Subcommands are imported
    lazily so that ``popliner --help`` and a plain run do no extra work.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        module = SUBCOMMANDS.get(cmd_name)
        if module is None:
            return None
        try:
            return importlib.import_module(module).command  # type: ignore[no-any-return]
        except ModuleNotFoundError as exc:
            if exc.name == module:
                return None
            raise

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in SUBCOMMANDS:
            args = [DEFAULT_COMMAND, *args]
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        return translate_errors(lambda: super(PoplinerGroup, self).invoke(ctx))

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["popliner.argv"] = list(args)  # for the exact commands in next-step hints
        args = _hoist_verbosity(args)
        # Options meant for the default command (`popliner -o x.csv prof.json`)
        # go through to it; `popliner --version` and `--help` stay ours.
        first_other = next((i for i, a in enumerate(args) if a not in _GROUP_OPTIONS), len(args))
        if first_other < len(args) and args[first_other].startswith("-"):
            args = [*args[:first_other], DEFAULT_COMMAND, *args[first_other:]]
        return super().parse_args(ctx, args)


_VERBOSITY = {"-q", "--quiet", "-v", "--verbose", "-vv", "-vvv"}
_GROUP_OPTIONS = _VERBOSITY | {"--help", "-h", "--version"}


def _hoist_verbosity(args: list[str]) -> list[str]:
    """Accept -v/-q anywhere on the line (before ``--``), as users type them."""
    end = args.index("--") if "--" in args else len(args)
    moved = [a for a in args[:end] if a in _VERBOSITY]
    kept = [a for a in args[:end] if a not in _VERBOSITY]
    return moved + kept + args[end:]


@click.group(cls=PoplinerGroup, context_settings={"help_option_names": ["-h", "--help"]},
             invoke_without_command=False)
@click.version_option(__version__, prog_name="popliner")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
@click.option("-q", "--quiet", is_flag=True, help="Only errors on stderr.")
def cli(verbose: int, quiet: bool) -> None:
    """Split a model too large for one IPU into a pipeline over several IPUs.

    \b
    popliner PROFILE [options]          analyse a profile (see `popliner analyse --help`)
    popliner PROFILE --solve --num-ipus 4
    popliner simulate pipeline.yaml     run a pipeline config on the bundled simulator
    popliner check pipeline.yaml --profile PROFILE   CI memory-budget gate
    popliner cache info                 where the cache is and how big it is
    """
    level = logging.ERROR if quiet else (logging.WARNING, logging.INFO, logging.DEBUG)[min(verbose + 1, 2)]
    setup_logging(level)


def setup_logging(level: int) -> None:
    """Package logger to stderr; configured here only, never in the library."""
    logger = logging.getLogger("popliner")
    for h in list(logger.handlers):
        logger.removeHandler(h)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("popliner: %(message)s"))
    logger.addHandler(handler)
    logger.setLevel(level)
    logger.propagate = False


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    cli.main(args=argv, prog_name="popliner")
