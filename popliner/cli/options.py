"""Options every command spells the same way: ``-o/--output FILE`` and ``-f/--force``.

``-o`` sends what the command would print on stdout to FILE instead (written
atomically); ``-f`` lets any output file of the command be replaced. Without
``-f`` an existing file is never touched and the command stops before doing
any work.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import IO, Any, TypeVar

import click

from popliner.fileio import atomic_write

__all__ = ["force_option", "output_option", "output_stream"]

F = TypeVar("F", bound=Callable[..., Any])


def budget_fraction(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback for ``--budget``: a fraction of the tile in (0, 1], or unset."""
    if value is not None and not 0.0 < value <= 1.0:
        raise click.BadParameter(f"{value} is not a fraction in (0, 1]")
    return value


def force_option(help_text: str = "Overwrite existing output files.") -> Callable[[F], F]:
    return click.option("-f", "--force", is_flag=True, help=help_text)


def output_option(help_text: str = "Write what would go to stdout to FILE instead.") -> Callable[[F], F]:
    return click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
                        metavar="FILE", help=help_text)


def output_stream(output: str | None, force: bool,
                  newline: str | None = None) -> contextlib.AbstractContextManager[IO[str]]:
    """stdout (no FILE, or ``-``), or FILE written to a temporary name and renamed into place on success."""
    return atomic_write(output or "-", force=force, newline=newline)
