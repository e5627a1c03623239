"""Options every command spells the same way: ``-o/--output FILE`` and ``-f/--force``.

``-o`` sends what the command would print on stdout to FILE instead (written
atomically); ``-f`` lets any output file of the command be replaced. Without
``-f`` an existing file is never touched and the command stops before doing
any work.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from typing import IO, Any, TypeVar

import click

from popliner.fileio import atomic_write

__all__ = ["BYTES_PER_TILE", "CONFIG_TRAINING_PARAMS", "LAYERS_PER_STAGE", "LAYER_PARAMS", "LINK_BANDWIDTH",
           "MICRO_BATCHES", "MICRO_BATCH_SIZE", "NUM_IPUS", "REPLICAS", "SECONDS", "SEED", "SYNC_CYCLES",
           "FiniteFloat", "config_training_options", "force_option", "layer_options", "layering",
           "output_option", "output_stream"]

log = logging.getLogger("popliner")

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
        click.option("--replication-factor", type=REPLICAS, default=None,
                     help="Training: replicas of the pipeline." + note),
        click.option("--sharded-optimizer-state/--no-sharded-optimizer-state", default=None,
                     help="Training: optimizer state divided over the replicas." + note),
        click.option("--head-placement", type=click.Choice(list(HEAD_PLACEMENTS)), default=None,
                     help="Operations without a layer." + note),
    ]
    for decorate in reversed(decorators):
        func = decorate(func)
    return func


class FiniteFloat(click.FloatRange):
    """A float in a range that is also finite: click's FloatRange lets ``nan`` through (every comparison with
    it is false), and ``inf`` wherever there is no maximum."""

    name = "finite number"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


#: Ranges of the numbers the commands take. Each bound is far beyond any real use; they keep a typo or a
#: hostile value from turning into hours of work, gigabytes, or an overflow deep inside a library.
MAX_IPUS = 4096
NUM_IPUS = click.IntRange(1, MAX_IPUS)
BYTES_PER_TILE = click.IntRange(1, 2**32)
SECONDS = FiniteFloat(0.0, 1e7, min_open=True)
#: OR-Tools takes a 32-bit seed.
SEED = click.IntRange(0, 2**31 - 1)
#: Bytes per second of a link: up to 1 PB/s.
LINK_BANDWIDTH = FiniteFloat(0.0, 1e15, min_open=True)
MICRO_BATCHES = click.IntRange(1, 100_000)  # as the simulator's MAX_MICRO_BATCHES
REPLICAS = click.IntRange(1, 65_536)
LAYERS_PER_STAGE = click.IntRange(1, 1_000_000)
MICRO_BATCH_SIZE = click.IntRange(1, 10**9)
SYNC_CYCLES = click.IntRange(0, 10**12)


#: The main command's options that decide the layers (and the training view) of an analysis, as the
#: commands that read a config take them: a config made with ``--layer-name-regex R`` is checked with it.
LAYER_PARAMS: tuple[str, ...] = ("layer_preset", "layer_name_regex", "inputs_regex_layer_0", "layer_order",
                                 "op_layers", "all_vars", "backward_regex")


def layer_options(func: F) -> F:
    """``--layer-preset``, ``--layer-name-regex`` ... on a command that reads a config (default: the main
    command's defaults); give the ones the config or workbook was made with."""
    from popliner.ops.layers import AUTO_PRESET, preset_names

    note = " Give what the config was made with (default: the main command's default)."
    decorators = [
        click.option("--layer-preset", type=click.Choice([AUTO_PRESET, *preset_names()]), default=None,
                     help="Layer naming rule." + note),
        click.option("--layer-name-regex", default=None, help="Regex on operation names, group 1 is the layer." + note),
        click.option("--inputs-regex-layer-0", default=None,
                     help="Operations whose inputs match go to the first layer." + note),
        click.option("--layer-order", type=click.Choice(["steps", "natural"]), default=None,
                     help="Layer order." + note),
        click.option("--op-layers", default=None, help="Debug-context layers that name an operation." + note),
        click.option("--all-vars", is_flag=True, default=None,
                     help="Count variables of operations without a layer too." + note),
        click.option("--backward-regex", default=None,
                     help="Operation names of the backward pass and weight update." + note),
    ]
    for decorate in reversed(decorators):
        func = decorate(func)
    return func


def layering(given: Mapping[str, object]) -> dict[str, object]:
    """The ``AnalysisOptions`` fields the layer options in ``given`` (a command's keyword arguments) set."""
    from popliner.config.layering import analysis_fields

    return analysis_fields({name: given.get(name) for name in LAYER_PARAMS})
