"""The split-planner sheet: layers with an editable IPU column and live per-IPU figures.

Its rows are fixed (the constants below), so that the XLSX writer can freeze everything above the layer
table and keep the per-IPU figures in view while the IPU column is edited. A contiguous split in layer
order looks up popliner's own figure of each IPU's layer range on the "Pipeline figures" sheet
(:class:`~popliner.breakdown.RangeTable`: the bytes ``popliner check`` reports); any other split gets the
sum of its layers' own worst-tile bytes, an estimate, and the sheet says which. docs/spreadsheets.md
("Split planner") draws the layout row by row, with the formulas.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass
from typing import IO, TextIO

from popliner.breakdown import Breakdown, LayerRow, RangeTable
from popliner.config.workbook import IPU_COL, PLANNER_SHEET, TRAINING_COL
from popliner.errors import UsageProblem
from popliner.solvers.result import SplitResult
from popliner.writers.formula import (
    And,
    Arith,
    Cell,
    CellRef,
    Compare,
    Const,
    CountIf,
    Expr,
    If,
    Index,
    Match,
    RangeRef,
    Ref,
    Sum,
    SumIf,
    mb,
)
from popliner.writers.grid import Grid
from popliner.writers.tables import (
    BYTES_FORMAT,
    COMPONENT_HEADERS,
    COUNT_FORMAT,
    MB_FORMAT,
    OTHER_HEADER,
    TableFormat,
    write_grid,
)

__all__ = [
    "EXACT_TEXT",
    "ESTIMATE_TEXT",
    "PLANNER_NOTE",
    "PLANNER_SHEET",
    "RANGES_SHEET",
    "PlannerLayout",
    "default_num_ipus",
    "planner_grid",
    "ranges_grid",
    "training_assumed",
    "write_planner",
]

RANGES_SHEET = "Pipeline figures"
PLANNER_TITLE = (
    "Split planner: type an IPU number for each layer in column B; the per-IPU figures above the table update."
)
PLANNER_NOTE = (
    "For a contiguous split (each IPU one run of layers, IPUs in layer order from IPU 0) the worst-tile bytes "
    "are popliner's exact figures, the same as `popliner check` gives: looked up per IPU on the "
    f"'{RANGES_SHEET}' sheet (stash and copy buffers included). Any other assignment falls back to the sum "
    "of the layers' own figures, an estimate only. `popliner check THIS.xlsx --profile P` checks the split "
    "typed here."
)
EXACT_TEXT = "exact: popliner's figures for this contiguous split (as popliner check)"
ESTIMATE_TEXT = (
    "estimate: not a contiguous split over the IPUs of the table, so row 12 adds up the layers' own figures "
    "(no stash, shared code counted per layer); type each layer's IPU in column B from row 19"
)

# Fixed rows of the layout (see the module docstring).
BUDGET_ROW = 3
MODE_ROW = 4
UNLAYERED_ROW = 5
STATUS_ROW = 6
IPU_ROW = 7
COUNT_ROW = 8
FIRST_ROW = 9
LAST_ROW = 10
CONTIGUOUS_ROW = 11
WORST_ROW = 12
HEADROOM_ROW = 13
FITS_ROW = 14
ESTIMATE_ROW = 15
TOTAL_ROW = 16
MB_ROW = 17
HEADER_ROW = 18
FIRST_LAYER_ROW = 19

# Columns of the layer table.
WORST_COL = 3
FIRST_COMPONENT_COL = 4
TOTAL_COL = 9
MB_COL = 10
CYCLES_COL = 11
INDEX_COL = 12  # the layer's position (0-based), which the range lookup keys on
RUN_COL = 13  # the IPU where a run of equal IPUs starts, else blank: one run per IPU means contiguous
#: The compiler's other categories, only for a profile that has them: after the columns formulas read, so
#: that every other column stays where it is; the layer's Total adds it.
OTHER_COL = 14

#: Number formats of the layer table's columns.
_LAYER_FORMATS = {IPU_COL: COUNT_FORMAT, WORST_COL: BYTES_FORMAT, MB_COL: MB_FORMAT, CYCLES_COL: BYTES_FORMAT,
                  **{c: BYTES_FORMAT for c in range(FIRST_COMPONENT_COL, TOTAL_COL + 1)},
                  INDEX_COL: COUNT_FORMAT, RUN_COL: COUNT_FORMAT}

# Where the training options are (MODE_ROW): a label, then the options as JSON.
TRAINING_LABEL_COL = 6
TRAINING_LABEL = "Training options"

# Columns of the Pipeline figures sheet.
KEY_COL = 1
FIRST_FIGURE_COL = 6


@dataclass(frozen=True)
class PlannerLayout:
    """Where the planner's interesting cells are, for styling, reading back and tests."""

    budget: CellRef
    unplaced: CellRef
    exact: CellRef
    num_ipus: int
    layer_counts: RangeRef
    worst_sums: RangeRef  # the per-IPU worst-tile figure (exact or estimate)
    headroom: RangeRef
    fits: RangeRef
    header_row: int
    first_layer_row: int
    last_layer_row: int  # < first_layer_row when there are no layers

    @property
    def has_layers(self) -> bool:
        return self.last_layer_row >= self.first_layer_row

    def layer_column(self, col: int) -> RangeRef:
        """A column of the layer table as an absolute range (only when there are layers)."""
        first = CellRef(self.first_layer_row, col, abs_row=True, abs_col=True)
        return RangeRef(first, CellRef(self.last_layer_row, col, abs_row=True, abs_col=True))


def default_num_ipus(breakdown: Breakdown, budget_bytes: int, split: SplitResult | None) -> int:
    """How many IPU columns the planner offers.

    With a split: every IPU it requested or used. Without: enough IPUs for the
    summed worst-tile figures to fit, at most one per layer.
    """
    if split is not None:
        used = max(split.ipu_of_layer.values(), default=-1) + 1
        return max(1, split.num_ipus_requested, used)
    need = math.ceil(sum(layer.worst_tile_bytes for layer in breakdown.layers) / budget_bytes)
    return max(1, min(need, len(breakdown.layers)))


def planner_grid(
    breakdown: Breakdown,
    *,
    budget_bytes: int,
    split: SplitResult | None = None,
    num_ipus: int | None = None,
    name: str = PLANNER_SHEET,
) -> tuple[Grid, PlannerLayout]:
    """Build the planner sheet. IPUs come from ``split`` when given, else every layer is on IPU 0.

    A layer the split does not place is left blank, so it shows up in the
    "layers on no listed IPU" count instead of silently landing on IPU 0.
    Exact figures need ``breakdown.ranges`` and the :func:`ranges_grid` sheet
    in the same workbook; without them the planner shows estimates only.
    """
    if budget_bytes <= 0:
        raise UsageProblem(f"the per-tile budget must be positive, got {budget_bytes}")
    ipus = num_ipus if num_ipus is not None else default_num_ipus(breakdown, budget_bytes, split)
    if ipus < 1:
        raise UsageProblem(f"the planner needs at least one IPU, got {ipus}")
    layout = _layout(len(breakdown.layers), ipus)
    grid = Grid(name, column_formats=_LAYER_FORMATS | ({OTHER_COL: BYTES_FORMAT} if breakdown.has_other else {}))
    grid.append([PLANNER_TITLE], style="title")
    grid.append([PLANNER_NOTE], style="note")
    _add_params(grid, layout, breakdown, budget_bytes)
    _add_ipu_rows(grid, layout, breakdown.ranges)
    _add_layer_table(grid, breakdown.layers, split, breakdown.has_other)
    return grid, layout


def _layout(n_layers: int, ipus: int) -> PlannerLayout:
    def ipu_row(row: int) -> RangeRef:
        return RangeRef(CellRef(row, 2), CellRef(row, 1 + ipus))

    return PlannerLayout(
        budget=CellRef(BUDGET_ROW, 2, abs_row=True, abs_col=True),
        unplaced=CellRef(BUDGET_ROW, 3),
        exact=CellRef(STATUS_ROW, 3, abs_row=True, abs_col=True),
        num_ipus=ipus,
        layer_counts=ipu_row(COUNT_ROW),
        worst_sums=ipu_row(WORST_ROW),
        headroom=ipu_row(HEADROOM_ROW),
        fits=ipu_row(FITS_ROW),
        header_row=HEADER_ROW,
        first_layer_row=FIRST_LAYER_ROW,
        last_layer_row=FIRST_LAYER_ROW + n_layers - 1,
    )


def _add_params(grid: Grid, layout: PlannerLayout, breakdown: Breakdown, budget_bytes: int) -> None:
    # A figure goes before its explanation so the text can spill into the
    # empty cells on its right instead of being cut off.
    placed = Sum((layout.layer_counts,))
    grid.put(BUDGET_ROW, 1, "Budget per tile (bytes)")
    grid.put(BUDGET_ROW, 2, budget_bytes, fmt=BYTES_FORMAT)
    grid.put(BUDGET_ROW, 3, Arith(Const(len(breakdown.layers)), "-", placed), fmt=COUNT_FORMAT)
    grid.put(BUDGET_ROW, 4, f"layer(s) on no IPU listed below: give each layer an IPU from row {IPU_ROW}")
    grid.put(MODE_ROW, 1, "Mode")
    grid.put(MODE_ROW, 2, breakdown.mode or "inference")
    grid.put(MODE_ROW, 3, "Profile")
    grid.put(MODE_ROW, 4, breakdown.profile_path)
    grid.put(MODE_ROW, 5, breakdown.profile_sha256)
    if breakdown.training is not None:
        # Read back by `popliner check THIS.xlsx` and `config-from`, so the split is checked as it was solved.
        grid.put(MODE_ROW, TRAINING_LABEL_COL, TRAINING_LABEL)
        grid.put(MODE_ROW, TRAINING_COL, json.dumps(breakdown.training.as_document(), sort_keys=False))
        grid.put(UNLAYERED_ROW, 3, f"Figures assume: {breakdown.training.summary()}")
    unlayered = breakdown.unlayered.worst_tile_bytes if breakdown.unlayered is not None else 0
    grid.put(UNLAYERED_ROW, 1, "Operations of no layer (on IPU 0), worst-tile bytes")
    grid.put(UNLAYERED_ROW, 2, unlayered, fmt=BYTES_FORMAT)
    for row in (BUDGET_ROW, MODE_ROW, UNLAYERED_ROW):
        grid.set_style(row, "params")


def _ipu(col: int) -> Ref:
    return Ref(CellRef(IPU_ROW, col, abs_row=True))


def _at(row: int, col: int) -> Ref:
    return Ref(CellRef(row, col))


def _status_row(grid: Grid, layout: PlannerLayout, ranges: RangeTable | None) -> None:
    last_col = 1 + layout.num_ipus
    zero_ipus = CountIf(layout.layer_counts, Const(0))
    grid.put(STATUS_ROW, 1, "IPUs used")
    grid.put(STATUS_ROW, 2, Arith(Const(layout.num_ipus), "-", zero_ipus), fmt=COUNT_FORMAT)
    exact: Cell = False
    if ranges is not None and layout.has_layers:
        contiguous = RangeRef(CellRef(CONTIGUOUS_ROW, 2), CellRef(CONTIGUOUS_ROW, last_col))
        exact = And((
            Compare(Ref(layout.unplaced), "=", Const(0)),
            contiguous,
            Compare(_at(STATUS_ROW, 2), "<=", Const(ranges.max_ipus)),
        ))
    grid.put(STATUS_ROW, 3, exact)
    grid.put(STATUS_ROW, 4, If(Ref(layout.exact), Const(EXACT_TEXT), Const(ESTIMATE_TEXT)))
    grid.set_style(STATUS_ROW, "params")


def _contiguous(layout: PlannerLayout, col: int) -> Expr:
    """One run of this IPU's layers, right after the previous IPU's (IPU 0 starting at layer 0)."""
    one_run = Compare(CountIf(layout.layer_column(RUN_COL), _ipu(col)), "=", Const(1))
    if col == 2:
        in_order: Expr = Compare(_at(FIRST_ROW, col), "=", Const(0))
    else:
        in_order = And((
            Compare(_at(COUNT_ROW, col - 1), ">", Const(0)),
            Compare(Arith(_at(LAST_ROW, col - 1), "+", Const(1)), "=", _at(FIRST_ROW, col)),
        ))
    return If(Compare(_at(COUNT_ROW, col), "=", Const(0)), Const(True), And((one_run, in_order)))


def _lookup(layout: PlannerLayout, col: int, ranges: RangeTable) -> Expr:
    """This IPU's exact figure: its range's row on the figures sheet, the column of its depth."""
    n = len(ranges.layers)
    last_row = 1 + n * (n + 1) // 2
    keys = RangeRef(CellRef(2, KEY_COL, RANGES_SHEET, True, True), CellRef(last_row, KEY_COL, RANGES_SHEET, True, True))
    figures = RangeRef(CellRef(2, FIRST_FIGURE_COL, RANGES_SHEET, True, True),
                       CellRef(last_row, FIRST_FIGURE_COL + ranges.depths - 1, RANGES_SHEET, True, True))
    key = Arith(Arith(_at(FIRST_ROW, col), "*", Const(n)), "+", _at(LAST_ROW, col))
    ipu = col - 2
    # Depth d = K-1-i picks column d+1 = K-i; inference has one column.
    depth_col: Expr = Arith(Ref(CellRef(STATUS_ROW, 2, abs_row=True, abs_col=True)), "-", Const(ipu)) if (
        ranges.training) else Const(1)
    return Index(figures, Match(key, keys), depth_col)


def _ipu_summary(layout: PlannerLayout, row: int, col: int, ranges: RangeTable | None) -> Expr:
    """The formula of one per-IPU cell (``row`` picks the figure)."""
    budget = Ref(layout.budget)
    count = _at(COUNT_ROW, col)
    if row == HEADROOM_ROW:
        return Arith(budget, "-", _at(WORST_ROW, col))
    if row == MB_ROW:
        return mb(CellRef(TOTAL_ROW, col))
    if row == FITS_ROW:
        return Compare(_at(WORST_ROW, col), "<=", budget)
    if not layout.has_layers:
        return Const(True) if row == CONTIGUOUS_ROW else Const(0) if row != FIRST_ROW and row != LAST_ROW else (
            Const(-1))
    ipus = layout.layer_column(IPU_COL)
    if row == COUNT_ROW:
        return CountIf(ipus, _ipu(col))
    if row == FIRST_ROW:
        return If(Compare(count, "=", Const(0)), Const(-1), Arith(Match(_ipu(col), ipus), "-", Const(1)))
    if row == LAST_ROW:
        return If(Compare(count, "=", Const(0)), Const(-1),
                  Arith(Arith(_at(FIRST_ROW, col), "+", count), "-", Const(1)))
    if row == CONTIGUOUS_ROW:
        return _contiguous(layout, col)
    if row == ESTIMATE_ROW:
        summed: Expr = SumIf(ipus, _ipu(col), layout.layer_column(WORST_COL))
        if col == 2:
            summed = Arith(summed, "+", Ref(CellRef(UNLAYERED_ROW, 2, abs_row=True, abs_col=True)))
        return summed
    if row == WORST_ROW:
        estimate = _at(ESTIMATE_ROW, col)
        if ranges is None:
            return If(Compare(count, "=", Const(0)), Const(0), estimate)
        return If(Compare(count, "=", Const(0)), Const(0), If(Ref(layout.exact), _lookup(layout, col, ranges),
                                                             estimate))
    return SumIf(ipus, _ipu(col), layout.layer_column(TOTAL_COL))  # TOTAL_ROW


_SUMMARY_ROWS: dict[int, tuple[str, str | None]] = {
    COUNT_ROW: ("Layers", COUNT_FORMAT),
    FIRST_ROW: ("First layer (#, -1: none)", COUNT_FORMAT),
    LAST_ROW: ("Last layer (#, -1: none)", COUNT_FORMAT),
    CONTIGUOUS_ROW: ("One run of layers, in pipeline order", None),
    WORST_ROW: ("Worst-tile bytes (row 6 says exact or estimate)", BYTES_FORMAT),
    HEADROOM_ROW: ("Headroom per tile (bytes)", BYTES_FORMAT),
    FITS_ROW: ("Fits the budget", None),
    ESTIMATE_ROW: ("Estimate: sum of its layers' worst-tile bytes", BYTES_FORMAT),
    TOTAL_ROW: ("Total (bytes, summed over tiles and layers)", BYTES_FORMAT),
    MB_ROW: ("Total (MB)", MB_FORMAT),
}


def _add_ipu_rows(grid: Grid, layout: PlannerLayout, ranges: RangeTable | None) -> None:
    _status_row(grid, layout, ranges)
    grid.put(IPU_ROW, 1, "IPU")
    grid.set_style(IPU_ROW, "header")
    for ipu in range(layout.num_ipus):
        grid.put(IPU_ROW, 2 + ipu, ipu, fmt=COUNT_FORMAT)
    for row, (label, fmt) in _SUMMARY_ROWS.items():
        grid.put(row, 1, label)
        for ipu in range(layout.num_ipus):
            grid.put(row, 2 + ipu, _ipu_summary(layout, row, 2 + ipu, ranges), fmt=fmt)


def _add_layer_table(grid: Grid, layers: tuple[LayerRow, ...], split: SplitResult | None,
                     with_other: bool = False) -> None:
    header = ["Layer", "IPU", "Worst-tile bytes", *COMPONENT_HEADERS, "Total (bytes)", "Total (MB)", "Cycles",
              "Layer #", "Run of IPU", *([OTHER_HEADER] if with_other else [])]
    for col, title in enumerate(header, start=1):
        grid.put(HEADER_ROW, col, title)
    grid.set_style(HEADER_ROW, "header")
    placement = split.ipu_of_layer if split is not None else {}
    for k, layer in enumerate(layers):
        row = grid.n_rows + 1
        ipu: Cell = placement.get(layer.layer) if split is not None else 0
        five = RangeRef(CellRef(row, FIRST_COMPONENT_COL), CellRef(row, TOTAL_COL - 1))
        total = Sum((five, CellRef(row, OTHER_COL)) if with_other else (five,))
        here = Ref(CellRef(row, IPU_COL))
        run: Cell = here if k == 0 else If(Compare(here, "=", Ref(CellRef(row - 1, IPU_COL))), Const(""), here)
        cells: list[Cell] = [layer.layer, ipu, layer.worst_tile_bytes, *layer.memory.as_tuple()]
        other = [layer.memory.other] if with_other else []
        grid.append([*cells, total, mb(CellRef(row, TOTAL_COL)), layer.cycles, k, run, *other])


def ranges_grid(ranges: RangeTable, name: str = RANGES_SHEET, assumes: str | None = None) -> Grid:
    """The exact figure of every contiguous layer range: the sheet the planner looks up.

    One row per range ``i..j`` (i, then j, ascending), keyed ``i * layers + j``;
    one figure column per depth (IPUs after the range's IPU) in training, one
    column in inference. Blank where no split puts the range at that depth.
    """
    n = len(ranges.layers)
    depth_titles = [f"Worst-tile bytes, {d} IPU(s) after it" for d in range(ranges.depths)] if ranges.training else [
        "Worst-tile bytes"]
    formats = {KEY_COL: COUNT_FORMAT, 2: COUNT_FORMAT, 3: COUNT_FORMAT}
    formats.update({FIRST_FIGURE_COL + d: BYTES_FORMAT for d in range(len(depth_titles))})
    grid = Grid(name, column_formats=formats)
    note = [f"Figures assume: {assumes}"] if assumes else []
    grid.append(["Key (first x layers + last)", "First layer (#)", "Last layer (#)", "First layer", "Last layer",
                 *depth_titles, *note], style="header")
    for i in range(n):
        for j in range(i, n):
            figures: list[Cell] = [int(v) if v >= 0 else None for v in ranges.values[i, j]]
            grid.append([i * n + j, i, j, ranges.layers[i], ranges.layers[j], *figures])
    return grid


def write_planner(
    breakdown: Breakdown,
    stream: TextIO | IO[str],
    fmt: TableFormat = "csv",
    *,
    budget_bytes: int,
    split: SplitResult | None = None,
    num_ipus: int | None = None,
) -> None:
    """The planner as a table: TSV keeps the formulas, CSV their values.

    Why it shows estimates only: docs/spreadsheets.md ('Split planner
    (``planner.write_planner``)'); pasted at A1, the TSV otherwise behaves like the workbook's sheet.
    """
    alone = dataclasses.replace(breakdown, ranges=None, training=None, has_other=False)
    grid, _ = planner_grid(alone, budget_bytes=budget_bytes, split=split, num_ipus=num_ipus)
    write_grid(grid, stream, fmt)


def training_assumed(breakdown: Breakdown) -> str | None:
    """The training options the figures assume, as the sheets state them (None in inference)."""
    return breakdown.training.summary() if breakdown.training is not None else None
