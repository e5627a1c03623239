"""Options every command spells the same way: ``-o/--output FILE`` and ``-f/--force``.

``-o`` sends what the command would print on stdout to FILE instead (written
atomically); ``-f`` lets any output file of the command be replaced. Without
``-f`` an existing file is never touched and the command stops before doing
any work.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar

import click

from popliner.errors import UsageProblem
from popliner.hardware import BANDWIDTH_RANGE, CLOCK_HZ_RANGE, DEFAULT_LINK_BANDWIDTH, DEFAULT_SYNC_CYCLES

__all__ = ["BUDGET_DEFAULT", "BYTES_PER_TILE", "CACHE_DIR_HELP", "CLOCK_HZ", "CONFIG_TRAINING_PARAMS",
           "LAYERS_PER_STAGE", "LINK_BANDWIDTH", "MICRO_BATCHES", "MICRO_BATCH_SIZE", "NUM_IPUS",
           "REPLICAS", "SECONDS", "SEED", "SYNC_CYCLES", "FiniteFloat", "budget_given", "budget_options",
           "cache_dir_option", "cache_options", "config_source_options", "config_training_options",
           "force_option", "gradient_accumulation_option", "headroom_given", "layer_options",
           "link_bandwidth_option", "output_option", "schedule_options", "stacked"]

F = TypeVar("F", bound=Callable[..., Any])


def fraction(ctx: click.Context, param: click.Parameter, value: float | tuple[float, ...] | None) -> Any:
    """Click callback: every value given is a fraction in (0, 1] (``--budget``, each ``--matmul-proportion``)."""
    for v in value if isinstance(value, tuple) else (value,):
        if v is not None and not 0.0 < v <= 1.0:
            raise click.BadParameter(f"{v} is not a fraction in (0, 1]")
    return value


def force_option(help_text: str = "Overwrite existing output files.") -> Callable[[F], F]:
    return click.option("-f", "--force", is_flag=True, help=help_text)


def output_option(help_text: str = "Write what would go to stdout to FILE instead.") -> Callable[[F], F]:
    return click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str), default=None,
                        metavar="FILE", help=help_text)


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
    return stacked(
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
    )(func)


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
LINK_BANDWIDTH = FiniteFloat(*BANDWIDTH_RANGE)
CLOCK_HZ = FiniteFloat(*CLOCK_HZ_RANGE)
MICRO_BATCHES = click.IntRange(1, 100_000)  # as the simulator's MAX_MICRO_BATCHES
REPLICAS = click.IntRange(1, 65_536)
LAYERS_PER_STAGE = click.IntRange(1, 1_000_000)
MICRO_BATCH_SIZE = click.IntRange(1, 10**9)
SYNC_CYCLES = click.IntRange(0, 10**12)


# ------------------------------------------------------------------ one block per concept, on every command


def stacked(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    """One decorator applying ``decorators``, the first listed first in ``--help``."""
    def apply(func: F) -> F:
        for decorate in reversed(decorators):
            func = decorate(func)
        return func
    return apply


#: Where the cache is when --cache-dir is not given (popliner.profile.cacheinfo.cache_dir decides).
CACHE_DIR_HELP = "Cache folder (default $POPLINER_CACHE_DIR, else $XDG_CACHE_HOME/popliner, else ~/.cache/popliner)."
#: ``--cache-dir``: on every command that reads a profile, and on ``popliner cache``.
cache_dir_option = click.option("--cache-dir", type=click.Path(file_okay=False, path_type=str), default=None,
                                help=CACHE_DIR_HELP)


def cache_options(func: F) -> F:
    """``--no-cache`` and ``--cache-dir``: the derived-data cache of every command that reads a profile."""
    return stacked(
        click.option("--no-cache", is_flag=True, help="Do not read or write the derived-data cache."),
        cache_dir_option,
    )(func)


def link_bandwidth_option(func: F) -> F:
    return click.option("--link-bandwidth", type=LINK_BANDWIDTH, default=DEFAULT_LINK_BANDWIDTH, show_default=True,
                        help="Bytes/s of an inter-IPU copy (one IPU-Link: 512 Gbit/s), for transfer cycles.")(func)


def schedule_options(func: F) -> F:
    """``--micro-batch-size`` and ``--sync-cycles``: what a simulated step assumes beyond the config."""
    return stacked(
        click.option("--micro-batch-size", type=MICRO_BATCH_SIZE, default=1, show_default=True,
                     help="Samples per micro-batch, for the throughput."),
        click.option("--sync-cycles", type=SYNC_CYCLES, default=DEFAULT_SYNC_CYCLES, show_default=True,
                     help="Clock cycles of the sync before each copy phase."),
    )(func)


def gradient_accumulation_option(default: str) -> Callable[[F], F]:
    """``--gradient-accumulation``/``-G``: micro-batches per step; ``default`` says what unset means."""
    return click.option("--gradient-accumulation", "-G", type=MICRO_BATCHES, default=None,
                        help=f"Micro-batches per step G (default: {default}).")


#: ``--budget``'s default where a command splits a profile (popliner.base.ProfileBase.budget): one rule, one text.
BUDGET_DEFAULT = ("1 less the model's measured shortfall against the profile's own tileMemory when it has the "
                  "compiler's other categories, else 1; README: what fits means")


def budget_options(default: str) -> Callable[[F], F]:
    """``--budget F``, the fraction of each tile an IPU may use, and its alias ``--headroom F`` = ``--budget 1-F``
    (the fraction kept free); :func:`budget_given` turns the pair into one fraction."""
    return stacked(
        click.option("--budget", type=float, default=None, callback=fraction, metavar="FRACTION",
                     help=f"Fraction of each tile's bytes an IPU may use (default: {default})."),
        click.option("--headroom", type=float, default=None, callback=headroom_fraction, metavar="FRACTION",
                     help="Alias: --headroom F is --budget 1-F, the fraction of each tile kept free."),
    )


def headroom_fraction(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """Click callback for ``--headroom``: a fraction of the tile in [0, 1), or unset."""
    if value is not None and not 0.0 <= value < 1.0:
        raise click.BadParameter(f"{value} is not a fraction in [0, 1)")
    return value


def budget_given(budget: float | None, headroom: float | None) -> float | None:
    """The usable fraction ``--budget``/``--headroom`` give (None: neither); both at once is refused."""
    if budget is not None and headroom is not None:
        raise UsageProblem(f"--budget {budget} and --headroom {headroom} both set the budget "
                           "(--headroom F is --budget 1-F): give one")
    return budget if headroom is None else 1.0 - headroom


def headroom_given(budget: float | None, headroom: float | None) -> float | None:
    """The fraction kept free ``--budget``/``--headroom`` give: ``--headroom`` as given, ``--budget F`` as 1-F,
    None when neither is (the planner's measured default)."""
    budget_given(budget, headroom)  # refuses both at once
    return headroom if budget is None else 1.0 - budget


def layer_options(func: F) -> F:
    """``--layer-preset``, ``--layer-name-regex`` ... (:data:`popliner.config.layering.LAYER_OPTION_KEYS`) on a
    command that reads a config (default: the main command's defaults); give the ones the config or workbook was
    made with: a config made with ``--layer-name-regex R`` is checked with it."""
    from popliner.ops.layers import AUTO_PRESET, preset_names

    note = " Give what the config was made with (default: the main command's default)."
    return stacked(
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
    )(func)


def config_source_options(func: F) -> F:
    """What a command that recomputes a config's figures from a profile takes: the cache, and the training and
    layer options the config was made with."""
    return stacked(cache_options, config_training_options, layer_options)(func)
