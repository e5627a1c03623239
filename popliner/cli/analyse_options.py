"""The options of ``popliner PROFILE`` (the default command), kept apart from what it does with them.

Each returns one decorator; :func:`analyse_options` applies them all, in the
order ``--help`` lists them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click

from popliner.analysis import DEFAULT_BACKWARD_REGEX
from popliner.cli.check_ci import baseline_options
from popliner.cli.options import (
    BUDGET_DEFAULT,
    BYTES_PER_TILE,
    LAYERS_PER_STAGE,
    NUM_IPUS,
    REPLICAS,
    SECONDS,
    SEED,
    budget_options,
    cache_options,
    fraction,
    gradient_accumulation_option,
    link_bandwidth_option,
    stacked,
)
from popliner.framework import FRAMEWORKS
from popliner.layout import HEAD_PLACEMENTS
from popliner.memory.training import DEFAULT_UPDATE_REGEX, OPTIMIZER_STATES, RECOMPUTE_REQUESTS
from popliner.ops.layers import AUTO_PRESET, DEFAULT_INPUTS_REGEX_LAYER_0, preset_names
from popliner.ops.operations import DEFAULT_OP_LAYERS

__all__ = ["HiddenArgument", "analyse_options"]

F = TypeVar("F", bound=Callable[..., Any])


class HiddenArgument(click.Argument):
    """An argument that is accepted only to be refused with a helpful message: not in the usage line."""

    def get_usage_pieces(self, ctx: click.Context) -> list[str]:
        return []


#: Every option of the command, the first listed first in ``--help``.
analyse_options: Callable[[F], F] = stacked(
    click.option("--operation-breakdown", is_flag=True, help="One row per operation: layer, note, name, components."),
    click.option("--layer-breakdown", is_flag=True, help="One row per layer (the default table)."),
    click.option("--memory-totals", is_flag=True, help="Totals by category beside the profile's own figures."),
    click.option("--memory-affinity", is_flag=True, help="Layer x layer bytes of variables both layers use."),
    click.option("--interlayer-communication", "interlayer", is_flag=True,
                  help="Layer x layer bytes going live in one layer and dying in the other."),
    click.option("--format", "fmt", type=click.Choice(["csv", "tsv"]), default=None,
                  help="csv: values; tsv: live formulas. Default from the -o suffix, else csv."),
    click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=str),
                  help="Write to FILE, in what its name says: tables (.csv, .tsv, .txt, any other name), the review "
                  "workbook (.xlsx); with --solve also the split JSON (.json), the pipeline config (.yaml, .yml) or "
                  "the report (.html)."),
    click.option("--plot", type=click.Path(dir_okay=False, path_type=str),
                  help="PNG/SVG of per-layer memory; with --solve also NAME-split and NAME-tiles images."),
    click.option("-f", "--force", is_flag=True, help="Overwrite existing output files."),
    click.option("--layer-preset", type=click.Choice([AUTO_PRESET, *preset_names()]), default=AUTO_PRESET,
                  show_default=True, help="Layer naming rule: PopART scopes or the module paths of PyTorch models; "
                  "auto picks the one that gives the most operations a layer."),
    click.option("--layer-name-regex", default=None,
                  help="Regex on operation names, group 1 is the layer; overrides --layer-preset."),
    click.option("--inputs-regex-layer-0", default=DEFAULT_INPUTS_REGEX_LAYER_0, show_default=True,
                  help="Operations whose inputs match go to the first layer."),
    click.option("--layer-order", type=click.Choice(["steps", "natural"]), default="steps", show_default=True,
                  help="steps: order of first appearance; natural: natural sort of layer names."),
    click.option("--op-layers", default=",".join(DEFAULT_OP_LAYERS), show_default=True,
                  help="Debug-context layers that name an operation (comma separated)."),
    click.option("--all-vars", is_flag=True,
                  help="Count variables of operations without a layer too (PopLiner counted only layered ones)."),
    click.option("--mode", type=click.Choice(["auto", "inference", "training"]), default="auto", show_default=True,
                  help="Training keeps stashes; auto looks for gradient operations."),
    click.option("--backward-regex", default=DEFAULT_BACKWARD_REGEX, show_default=True,
                  help="Operation names of the backward pass and weight update."),
    click.option("--recompute", type=click.Choice(list(RECOMPUTE_REQUESTS)), default=None,
                  help="Training: recomputation to model (docs/solvers.md); auto = the least that fits. "
                       "Default: what the profile's framework does (PopTorch, optimum: over 2+ IPUs, every-layer "
                       "when every layer holds a recomputation checkpoint, else pipeline; PopART, TensorFlow: none). "
                       "A profile compiled with recomputation keeps its own (pipeline or every-layer asked of it "
                       "is refused)."),
    click.option("--optimizer-state", type=click.Choice(list(OPTIMIZER_STATES)), default=None,
                  help="Training: off-chip keeps optimizer state in streaming memory, loaded for its update only. "
                       "Default: as the profile was compiled (off-chip when its weight update streams it), else "
                       "on-chip; on-chip is refused for a profile compiled off chip."),
    click.option("--replication-factor", type=REPLICAS, default=1, show_default=True,
                  help="Training: replicas of the pipeline (total IPUs = IPUs x replicas)."),
    click.option("--sharded-optimizer-state", is_flag=True,
                  help="Training: divide optimizer state over the replicas (replicated tensor sharding)."),
    click.option("--head-placement", type=click.Choice([*HEAD_PLACEMENTS, "auto"]), default=None,
                  help="Operations without a layer: all on the first IPU (first); the embedding there and the head "
                       "on the last IPU (last) or back on IPU 0 (wrap); auto: the one that fits on the fewest IPUs. "
                       "Default: what the profile's framework builds (docs/pipeline-config.md)."),
    click.option("--framework", type=click.Choice(list(FRAMEWORKS)), default=None,
                  help="The framework that builds the pipeline (default: found in the profile; docs/frameworks.md)."),
    click.option("--update-regex", default=DEFAULT_UPDATE_REGEX, show_default=True,
                  help="Names of weight-update operations (finds the optimizer state)."),
    click.option("--optimizer-state-regex", default=None,
                  help="Variable names that are optimizer state (replaces the rule)."),
    click.option("--solve", is_flag=True, help="Split the layers over --num-ipus IPUs; JSON on stdout."),
    click.option("--num-ipus", type=NUM_IPUS, default=4, show_default=True, help="IPUs to split over."),
    click.option("--exact-ipus", is_flag=True, help="Use exactly --num-ipus IPUs (ILP), not at most."),
    click.option("--min-ipus", is_flag=True,
                  help="Use the fewest IPUs that fit (at most --num-ipus) instead of spreading for throughput."),
    click.option("--mem-per-tile", type=BYTES_PER_TILE, default=None,
                  help="Bytes per tile. Default: the profile's bytesPerTile (638976 on Mk2)."),
    budget_options(BUDGET_DEFAULT),
    click.option("--solver", type=click.Choice(["ilp", "greedy"]), default="ilp", show_default=True),
    click.option("--time-limit", type=SECONDS, default=60.0, show_default=True,
                  help="Seconds for the whole solve: set-up, search, best effort, overflow details, the hint."),
    click.option("--seed", type=SEED, default=0, show_default=True,
                  help="Accepted for old command lines; changes nothing (the exact solver has no randomness)."),
    click.option("--split-after", multiple=True, metavar="LAYER", help="Force a stage to end after LAYER."),
    click.option("--same-ipu", multiple=True, metavar="A,B", help="Keep layers A and B on one IPU."),
    click.option("--min-layers-per-stage", type=LAYERS_PER_STAGE, default=1, show_default=True),
    click.option("--keep-shared-vars-together", is_flag=True,
                  help="Never split between layers that share an always-live variable (tied weights)."),
    link_bandwidth_option,
    click.option("--config-out", type=click.Path(dir_okay=False, path_type=str),
                  help="With --solve: write the pipeline config (YAML) here."),
    gradient_accumulation_option("max(16, 2 x stages), for the config"),
    click.option("--ipu-config-out", type=click.Path(dir_okay=False, path_type=str),
                  help="With --solve: write an optimum-graphcore ipu_config.json for the split here. Without "
                       "--framework the split is planned as optimum-graphcore builds it (head placement, "
                       "recomputation), which stderr says when the profile names another framework."),
    click.option("--matmul-proportion", type=float, multiple=True, callback=fraction, metavar="F",
                  help="ipu_config.json matmul_proportion: once for every IPU, or once per IPU (default 0.6)."),
    click.option("--report", "report", type=click.Path(dir_okay=False, path_type=str), metavar="FILE.html",
                  help="With --solve: write the HTML review report of the split here (one self-contained file)."),
    click.option("--check-out", type=click.Path(dir_okay=False, path_type=str), metavar="FILE",
                  help="With --solve and --config-out: write `popliner check`'s result of the config here, in the "
                       "format of its name (.json the result file, .md Markdown, .xml JUnit, else the table)."),
    baseline_options,
    cache_options,
)
