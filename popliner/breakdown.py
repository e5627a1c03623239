"""The review tables (operations, layers, totals, layer matrices) of an analysis: their rows, and how they are built.

The rows are plain data handed to the writers (CSV/TSV, XLSX, plots, the
report), which only format them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.analysis import Analysis
from popliner.memory.categories import MODELLED
from popliner.memory.coverage import Coverage, coverage_of
from popliner.memory.sharing import handed_over_bytes, shared_bytes
from popliner.memory.training import RecomputeRequest
from popliner.memory.types import COMPONENT_TITLES, ComponentBytes, StageMemory, components
from popliner.memory.work import check_layer_rows
from popliner.pipeline import position_memory
from popliner.training_record import ConfigTraining, training_of

__all__ = ["Breakdown", "LayerMatrix", "LayerRow", "OperationRow", "RangeTable", "TotalsRow", "affinity_matrix",
           "build_breakdown", "interlayer_matrix", "profile_coverage", "profile_totals"]


@dataclass(frozen=True)
class OperationRow:
    """One distinct operation. ``memory`` is the operation alone, summed over tiles."""

    position: int  # order of first step
    layer: str | None
    note: str  # how the layer was found, e.g. "name", "inputs", "call", "inputs-layer-0", "none"
    name: str
    first_step: int  # -1 when it runs at no step
    last_step: int
    memory: ComponentBytes


@dataclass(frozen=True)
class LayerRow:
    """One layer as a stage of its own. ``memory`` is summed over tiles."""

    layer: str
    num_operations: int
    memory: ComponentBytes
    worst_tile: int
    worst_tile_bytes: int  # the layer's total on its worst tile
    cycles: int


@dataclass(frozen=True)
class TotalsRow:
    """One memory category over the whole profile (summed over tiles).

    ``model`` is popliner's figure, ``ground_truth`` the profile's own
    ``tileMemory`` figure when present.
    """

    category: str
    model: int
    ground_truth: int | None


@dataclass(frozen=True, eq=False)
class LayerMatrix:
    """A square layer x layer matrix of bytes (affinity or interlayer traffic).

    ``sheet`` is a short name for a workbook sheet (at most 31 characters); the title says the rest.
    """

    title: str
    layers: tuple[str, ...]
    values: np.ndarray  # int64 [len(layers), len(layers)]
    sheet: str = ""


@dataclass(frozen=True, eq=False)
class RangeTable:
    """The exact worst-tile figure of every contiguous layer range, as the planner looks it up.

    ``values[i, j, d]`` is popliner's figure (the pipeline rules of
    :mod:`popliner.pipeline`: the model of the range's operations, with the
    operations of no layer when ``i == 0``, the stash entries of an IPU that
    has ``d`` IPUs after it, and the copy buffers of its two boundaries) for
    layers ``i..j`` on an IPU with ``d`` IPUs after it; -1 where no contiguous
    split over at most ``max_ipus`` IPUs puts that range at that depth. In
    inference the figure does not depend on ``d`` and there is one column.
    """

    layers: tuple[str, ...]
    training: bool
    max_ipus: int
    values: np.ndarray  # int64 [layers, layers, depths]

    @property
    def depths(self) -> int:
        return int(self.values.shape[2]) if self.values.ndim == 3 else 0


@dataclass(frozen=True)
class Breakdown:
    """Everything the review spreadsheets show for one profile."""

    profile_path: str
    tiles: int
    bytes_per_tile: int
    operations: tuple[OperationRow, ...]
    layers: tuple[LayerRow, ...]
    totals: tuple[TotalsRow, ...]
    #: The operations of no layer as a stage of their own (they go on the first IPU); None if there are none.
    unlayered: LayerRow | None = None
    #: Every operation on one IPU, counted like a stage: the model's own total, which no sum of rows gives.
    whole: LayerRow | None = None
    #: The exact figure of every contiguous layer range, for the planner (None: estimates only).
    ranges: RangeTable | None = None
    mode: str = ""  # "training" or "inference", as the figures were computed
    profile_sha256: str = ""
    #: The training options the figures were computed with (None in inference).
    training: ConfigTraining | None = None
    #: The profile has compiler categories the five components leave out: every table shows the sixth.
    has_other: bool = False


#: Ground-truth categories of ``tileMemory`` that match each model component (the others are ``other``:
#: :mod:`popliner.memory.categories`; ``vectorListDescriptor`` is one of them, following vertex instances).
GROUND_TRUTH = {comp: (f"category.{name}",) for name, comp in MODELLED.items()}


def build_breakdown(analysis: Analysis, *, with_operations: bool = True, with_totals: bool = True,
                    planner_ipus: int | None = None, requested_recompute: RecomputeRequest | None = None) -> Breakdown:
    """The review tables; ``planner_ipus`` adds the range table of splits over up to that many IPUs.

    ``requested_recompute``: the ``--recompute`` asked for (``auto`` is recorded next to the mode it chose).
    """
    p = analysis.profile
    # The range table first: it refuses (from the sizes) a table past its limit before the rest is computed.
    ranges = range_table(analysis, planner_ipus) if planner_ipus else None
    return Breakdown(
        profile_path=p.path,
        tiles=p.tiles,
        bytes_per_tile=p.target.bytes_per_tile,
        operations=operation_rows(analysis) if with_operations else (),
        layers=layer_rows(analysis),
        totals=profile_totals(analysis) if with_totals else (),
        unlayered=unlayered_row(analysis),
        whole=whole_model_row(analysis),
        ranges=ranges,
        mode=analysis.mode,
        profile_sha256=p.sha256,
        training=training_of(analysis, requested_recompute),
        has_other=analysis.model.has_other,
    )


def range_table(analysis: Analysis, max_ipus: int) -> RangeTable:
    """The exact worst-tile figure of every contiguous layer range at every depth a split can give it.

    Figures come from the solver's range table and :func:`popliner.pipeline.position_memory`,
    so they are the bytes ``solve``, ``check`` and ``simulate`` report for the same IPU. The
    range ``i..j`` sits at position 0 when ``i == 0`` (it then carries the operations of no
    layer), else at some position >= 1; only the depth ``d`` (IPUs after it) changes its
    figure, through the stash, so it is evaluated at position ``k`` of ``k + 1 + d`` IPUs.
    """
    # The layers a split places in order: a wrapped head is none of them (it goes with the range at position 0).
    names = analysis.facts.layout.placed_names
    n = len(names)
    training = analysis.mode == "training"
    max_ipus = max(1, min(max_ipus, n))
    depths = max_ipus if training else 1
    values = np.full((n, n, depths), -1, np.int64)
    costs = analysis.range_table(np.iinfo(np.int64).max // 4)
    for i in range(n):
        k = 0 if i == 0 else 1
        for j in range(i, n):
            for d in _depths(i, j, n, max_ipus, training):
                figure = position_memory(costs, i, j, k, k + 1 + d, training)
                values[i, j, d if training else 0] = int(figure)
    return RangeTable(names, training, max_ipus, values)


def _depths(i: int, j: int, n: int, max_ipus: int, training: bool) -> range:
    """Depths a contiguous split over at most ``max_ipus`` IPUs can give range ``i..j``."""
    if j == n - 1:
        return range(0, 1)  # the last layer is on the last IPU
    most = min(n - 1 - j, max_ipus - 1 - (1 if i > 0 else 0))  # each later IPU needs a layer
    if not training:
        return range(1, 2) if most >= 1 else range(0)
    return range(1, most + 1)


def operation_rows(analysis: Analysis) -> tuple[OperationRow, ...]:
    ops, layers = analysis.ops, analysis.layers
    totals = analysis.model.per_operation_totals()
    return tuple(
        OperationRow(
            position=i,
            layer=layers.name_of_op(i),
            note=layers.note[i],
            name=ops.names[i],
            first_step=int(ops.first_step[i]),
            last_step=int(ops.last_step[i]),
            memory=totals[i],
        )
        for i in range(ops.count)
    )


#: How the layer tables name the operations of no layer (PopLiner's first row).
NO_LAYER = "(no layer)"
#: How the layer table names the whole model on one IPU.
WHOLE_MODEL = "Whole model on one IPU"


def _row(analysis: Analysis, name: str, ops: np.ndarray, mem: StageMemory | None = None) -> LayerRow:
    """The row of the operations ``ops`` as a stage of their own (``mem``: their figure, when known)."""
    mem = analysis.model.stage(ops) if mem is None else mem
    return LayerRow(layer=name, num_operations=len(ops), memory=mem.summed(), worst_tile=mem.worst_tile,
                    worst_tile_bytes=mem.worst_bytes, cycles=int(analysis.op_cycles[ops].sum()))


def layer_rows(analysis: Analysis) -> tuple[LayerRow, ...]:
    check_layer_rows(analysis.profile.path, analysis.profile.tiles, len(analysis.layer_names))
    return tuple(_row(analysis, name, analysis.layers.ops_of(k)) for k, name in enumerate(analysis.layer_names))


def unlayered_row(analysis: Analysis) -> LayerRow | None:
    """The operations of no layer as one stage (the first IPU carries them), None when every op has a layer."""
    ops = np.flatnonzero(analysis.layers.layer_of_op < 0)
    return _row(analysis, NO_LAYER, ops) if len(ops) else None


def whole_model_row(analysis: Analysis) -> LayerRow:
    """Every operation with every variable on one IPU: the Totals table's model figures, as a row.

    Code and variables that several layers share count once here, so this is
    smaller than the sum of the layer rows.
    """
    return _row(analysis, WHOLE_MODEL, np.arange(analysis.ops.count), analysis.whole_memory)


#: The Totals table's last two categories (the others are the component names of every other table).
TOTAL_SUMMED = "Total (summed over tiles)"
TOTAL_WORST = "Total on the worst tile"


def profile_totals(analysis: Analysis) -> tuple[TotalsRow, ...]:
    """Model figures over the whole profile beside the profile's own ground truth."""
    mem = analysis.whole_memory
    truth = analysis.profile.tile_memory or {}
    cats = analysis.model.categories
    summed = mem.summed().as_dict(cats is not None)
    rows = []
    for comp in components(cats is not None):
        keys = GROUND_TRUTH.get(comp, ()) if cats is None or comp != "other" else tuple(
            f"category.{name}" for name in cats.names)
        present = [truth[k] for k in keys if k in truth]
        ground = int(sum(int(v.sum()) for v in present)) if present else None
        rows.append(TotalsRow(COMPONENT_TITLES[comp], summed[comp], ground))
    both = truth["alwaysLive"] + truth["notAlwaysLivePeak"] if {"alwaysLive", "notAlwaysLivePeak"} <= truth.keys() \
        else None
    rows.append(TotalsRow(TOTAL_SUMMED, int(mem.total_per_tile.sum()), None if both is None else int(both.sum())))
    rows.append(TotalsRow(TOTAL_WORST, mem.worst_bytes, None if both is None else int(both.max())))
    cov = profile_coverage(analysis) if cats is not None else None
    if cov is not None:
        # Only with other categories, so that the tables of profiles without them keep their bytes.
        label = (f"Total on the tile the model covers least (tile {cov.lowest_tile}, {cov.lowest:.2%}; "
                 f"overall {cov.overall:.2%})")
        rows.append(TotalsRow(label, cov.lowest_model, cov.lowest_compiler))
    return tuple(rows)


def profile_coverage(analysis: Analysis) -> Coverage | None:
    """How much of the compiler's per-tile total the model accounts for (None without compiler totals)."""
    return coverage_of(analysis.profile, analysis.whole_memory)


def affinity_matrix(analysis: Analysis) -> LayerMatrix:
    """For each pair of layers, the bytes of variables both use (diagonal: all a layer uses)."""
    return LayerMatrix("Memory affinity (bytes of variables both layers use)", analysis.layer_names,
                       shared_bytes(analysis.facts), sheet="Affinity")


def interlayer_matrix(analysis: Analysis) -> LayerMatrix:
    """Bytes of variables that go live in the row's layer and die in the column's layer."""
    return LayerMatrix("Interlayer communication (bytes going live in row layer, dying in column layer)",
                       analysis.layer_names, handed_over_bytes(analysis.facts), sheet="Interlayer")
