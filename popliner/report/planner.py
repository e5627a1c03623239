"""The report's split planner: the figures of every contiguous split over the report's IPUs, for the page.

Why one record per range and position (:func:`planner_records`) makes the page
exact, what a record holds, and the only rules the page applies itself:
docs/report.md ('Plan it yourself: the split planner'). The browser test holds
those rules equal to Python's over many splits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.analysis import Analysis
from popliner.config.layering import layer_record
from popliner.config.model import ConfigStage, PipelineConfig, analysis_config, config_stage
from popliner.errors import UsageProblem
from popliner.memory.ranges import ProfileRanges
from popliner.pipeline import StageFigure
from popliner.simulator.inputs import ipu_figures
from popliner.simulator.types import IpuFigures
from popliner.solvers.result import SplitResult, StageResult, stage_result
from popliner.training_record import training_of

__all__ = ["MAX_PLANNER_RECORDS", "Planner", "PlannerRange", "build_planner", "contiguous_counts",
           "planner_config", "planner_records", "split_command_words"]

#: Most records a page embeds (about 0.2 kB each): 100 layers over 50 IPUs would need 65,000.
MAX_PLANNER_RECORDS = 20_000


@dataclass(frozen=True, eq=False)
class PlannerRange:
    """Layers ``first..last`` on the IPU at ``ipu`` of the planner's K: as solve and check report that IPU."""

    first: int
    last: int
    ipu: int
    stage: StageResult
    record: ConfigStage
    sim: IpuFigures


@dataclass(frozen=True, eq=False)
class Planner:
    """Everything the page's planner needs besides its script."""

    layers: tuple[str, ...]  # the layers a split places, in order (a wrapped head is none of them)
    num_ipus: int
    budget: int
    initial: tuple[int, ...]  # layers per IPU of the report's split (an even split when it is not contiguous)
    ranges: tuple[PlannerRange, ...]
    #: The report's split as the planner writes its config (solver ``planner``): the YAML's fixed part.
    config: PipelineConfig
    #: ``popliner PROFILE --solve ...`` without the ``--split-after`` flags, as shell words.
    command: tuple[str, ...]
    training: bool
    wraps: bool
    sharded: bool
    micro_batches: int
    micro_batch_size: int
    clock_hz: float
    link_bandwidth: float
    sync_cycles: float
    #: Not embedded (too many splits): why, else empty.
    refused: str = ""


def planner_records(layers: int, num_ipus: int) -> int:
    """Records a planner of ``layers`` over ``num_ipus`` embeds (one per valid range and position).

    With m = layers - K: m + 1 ranges at the first position (from layer 0) and at the last (to the last
    layer), (m + 1)(m + 2)/2 at each position between; one range on a single IPU.
    """
    m = layers - num_ipus
    if m < 0:
        return 0
    if num_ipus == 1:
        return 1
    return 2 * (m + 1) + (num_ipus - 2) * (m + 1) * (m + 2) // 2


def _valid(n: int, k: int) -> list[tuple[int, int, int]]:
    """(first, last, position) of every range some contiguous split over exactly ``k`` IPUs gives a position.

    The IPU at position p holds at least one layer, as does each before it and after it: the range starts at
    layer 0 at position 0 and ends at the last layer at position k - 1.
    """
    out = []
    for p in range(k):
        firsts = [0] if p == 0 else range(p, n - (k - p) + 1)
        for i in firsts:
            lasts = [n - 1] if p == k - 1 else range(i, n - (k - p) + 1)
            for j in lasts:
                out.append((i, j, p))
    return out


def contiguous_counts(groups: Sequence[Sequence[str]], layers: Sequence[str]) -> tuple[int, ...] | None:
    """Layers per IPU when ``groups`` place ``layers`` in order, one run of at least one each; else None.

    Names outside ``layers`` (a wrapped head on IPU 0) are left out.
    """
    known = set(layers)
    placed = [[name for name in group if name in known] for group in groups]
    if [name for group in placed for name in group] != list(layers) or not all(placed):
        return None
    return tuple(len(group) for group in placed)


def build_planner(analysis: Analysis, config: PipelineConfig, *, budget: int, micro_batches: int,
                  micro_batch_size: int, clock_hz: float, link_bandwidth: float, sync_cycles: float,
                  ipus: Sequence[StageResult] | None = None, max_records: int = MAX_PLANNER_RECORDS) -> Planner:
    """The planner of the report of ``config``'s split: every contiguous split over its IPU count.

    The report's split is where it starts (an even split when that is not contiguous). Past
    ``max_records`` records (what a page holds) it holds none, and says why. ``ipus``: the figures of ``config``'s
    split against ``budget`` when the caller has them (the report does), so that they are not worked out twice.
    """
    facts = analysis.facts
    names = facts.layout.placed_names
    n, k = len(names), config.num_ipus
    training = analysis.mode == "training"
    wraps = facts.layout.wraps_at(k)
    given = contiguous_counts(config.layer_groups, names)
    initial = given or tuple(n // k + (1 if u < n % k else 0) for u in range(k))  # else an even split
    template = planner_config(analysis, config, budget, micro_batches, _groups(analysis, initial),
                              ipus if given is not None else None)
    planner = Planner(layers=names, num_ipus=k, budget=budget, initial=initial, ranges=(), config=template,
                      command=split_command_words(analysis, budget, k), training=training,
                      wraps=wraps, sharded=template.execution == "sharded", micro_batches=micro_batches,
                      micro_batch_size=micro_batch_size, clock_hz=float(clock_hz),
                      link_bandwidth=float(link_bandwidth), sync_cycles=float(sync_cycles))
    records = planner_records(n, k)
    if records > max_records:
        return dataclasses.replace(planner, refused=f"{n} layers over {k} IPUs have {records:,} ranges to embed, "
                                   f"more than the {max_records:,} a page holds")
    tiles = int(analysis.profile.target.tiles_per_ipu)
    out = []
    # The solve's way to a stage's figure: the range table's running sets (each row grown one layer at a time)
    # give each range's model and stash entry, which range_figure takes from the table (the same figures).
    table = analysis.range_table(np.iinfo(np.int64).max // 4, lazy=True)
    for (i, j), positions in _by_range(_valid(n, k)).items():
        table.per_tile(i, j)
        for p, figure in _range_figures(analysis, table, i, j, positions, k):
            result = stage_result(figure, analysis.layer_names, budget)
            record = config_stage(p, result, training)
            sim = ipu_figures(record, tiles=tiles, training=training, receives=p > 0 or wraps, bytes_out=0)
            out.append(PlannerRange(i, j, p, result, record, sim))
    return dataclasses.replace(planner, ranges=tuple(out))


def _by_range(valid: Sequence[tuple[int, int, int]]) -> dict[tuple[int, int], list[int]]:
    """The positions of each range, ranges in the order of ``valid``'s first."""
    out: dict[tuple[int, int], list[int]] = {}
    for i, j, p in sorted(valid):
        out.setdefault((i, j), []).append(p)
    return out


def _range_figures(analysis: Analysis, table: ProfileRanges, i: int, j: int, positions: Sequence[int],
                   k: int) -> list[tuple[int, StageFigure]]:
    """The range's figure at each of ``positions`` (ascending) of ``k`` IPUs.

    :func:`popliner.pipeline.range_figure` at the first position; at the others (none is position 0, whose
    range alone starts at layer 0) only the stash depth differs, and the figure is the first's with that depth:
    the first position has the deepest stash, so its figure holds the stash entry of every later one.
    """
    from popliner.pipeline import range_figure, stash_depth

    training = analysis.mode == "training"
    first = range_figure(analysis.facts, i, j, positions[0], k, table)
    wraps = analysis.facts.layout.wraps_at(k)
    out = [(positions[0], first)]
    for p in positions[1:]:
        depth = stash_depth(p, k, wraps) if training else 0
        out.append((p, dataclasses.replace(first, position=p, stash_entries=depth)))
    return out


def _groups(analysis: Analysis, counts: Sequence[int]) -> list[list[str]]:
    """Layer names per IPU of a contiguous split given as counts (a wrapped head goes on IPU 0)."""
    layout = analysis.facts.layout
    names = layout.placed_names
    out, at = [], 0
    for count in counts:
        out.append(list(names[at:at + count]))
        at += count
    if layout.wraps_at(len(counts)) and layout.head_name is not None:
        out[0].append(layout.head_name)
    return out


def planner_config(analysis: Analysis, config: PipelineConfig, budget: int, micro_batches: int,
                   groups: Sequence[Sequence[str]], ipus: Sequence[StageResult] | None = None) -> PipelineConfig:
    """The pipeline config of a split the planner shows, as ``config-from`` makes one from a workbook's planner.

    ``ipus``: the split's figures against ``budget``, when known (else worked out here).
    """
    if ipus is not None and [list(i.layers) for i in ipus] == [list(g) for g in groups]:
        stages = tuple(ipus)
    else:
        stages = tuple(analysis.stage_results(groups, budget))
    split = SplitResult("planner", "PLANNER", analysis.mode, len(stages), budget, stages)
    requested = config.options.requested if config.options is not None else None
    # The framework the report's config records (None in an older one), as a config made from it would.
    return dataclasses.replace(analysis_config(analysis, split, micro_batches, training_of(analysis, requested),
                                               config.matmul_proportion), framework=config.framework)


def split_command_words(analysis: Analysis, budget: int, num_ipus: int) -> tuple[str, ...]:
    """``popliner PROFILE --solve ...`` with every option the figures depend on, ``--split-after`` flags to add.

    The budget goes in as ``--mem-per-tile BUDGET --headroom 0`` (the same bytes); the head placement and
    (training) the recomputation always, so that no framework default changes them.
    """
    from popliner.ops.roles import DEFAULT_UPDATE_REGEX

    if budget < 1:
        raise UsageProblem(f"the per-tile budget must be positive, got {budget}")
    t = analysis.options.training
    words = ["popliner", analysis.profile.path, "--solve", "--num-ipus", str(num_ipus), "--exact-ipus",
             "--mem-per-tile", str(budget), "--headroom", "0", "--mode", analysis.mode,
             "--head-placement", t.head_placement]
    if analysis.mode == "training":
        applied = analysis.facts.view.recompute
        if applied != "compiled":
            words += ["--recompute", applied]
        if t.optimizer_state != "on-chip":
            words += ["--optimizer-state", t.optimizer_state]
        if t.replication_factor != 1:
            words += ["--replication-factor", str(t.replication_factor)]
        if t.sharded_optimizer_state:
            words.append("--sharded-optimizer-state")
        if t.update_regex != DEFAULT_UPDATE_REGEX:
            words += ["--update-regex", t.update_regex]
        if t.optimizer_state_regex is not None:
            words += ["--optimizer-state-regex", t.optimizer_state_regex]
    for key, value in layer_record(analysis.options):
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            words += [flag] if value else []
        else:
            words += [flag, str(value)]
    return tuple(words)
