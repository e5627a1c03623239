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

__all__ = ["CONFIG_TRAINING_PARAMS", "config_training_options", "force_option", "output_option", "output_stream"]

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


#: The parameters :func:`config_training_options` adds, in the names ``ConfigTraining`` uses.
CONFIG_TRAINING_PARAMS: tuple[str, ...] = ("recompute", "optimizer_state", "replication_factor",
                                           "sharded_optimizer_state", "head_placement")


def config_training_options(func: F) -> F:
    """The training options on a command that reads a pipeline config: the config records them.

    Given, each must say what the config's ``training`` block says
    (:func:`popliner.config.options.check_cli_options`); not given, the
    config's value is used.
    """
    from popliner.memory.training import HEAD_PLACEMENTS, OPTIMIZER_STATES, RECOMPUTE_REQUESTS

    note = " Default and only accepted value: the config's (training block)."
    decorators = [
        click.option("--recompute", type=click.Choice(list(RECOMPUTE_REQUESTS)), default=None,
                     help="Training: recomputation." + note),
        click.option("--optimizer-state", type=click.Choice(list(OPTIMIZER_STATES)), default=None,
                     help="Training: where optimizer state lives." + note),
        click.option("--replication-factor", type=click.IntRange(min=1), default=None,
                     help="Training: replicas of the pipeline." + note),
        click.option("--sharded-optimizer-state/--no-sharded-optimizer-state", default=None,
                     help="Training: optimizer state divided over the replicas." + note),
        click.option("--head-placement", type=click.Choice(list(HEAD_PLACEMENTS)), default=None,
                     help="Operations without a layer." + note),
    ]
    for decorate in reversed(decorators):
        func = decorate(func)
    return func
