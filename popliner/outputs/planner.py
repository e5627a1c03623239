"""The split-planner sheet: layers with an editable IPU column and live per-IPU sums.

Layout (rows are fixed so the XLSX writer can freeze everything above the
layer table and keep the per-IPU figures in view while the IPU column is
edited)::

    1  title
    2  note: the per-IPU figures are upper bounds; `popliner check` is exact
    3  Budget per tile (bytes) | <budget> | <layers on no listed IPU> | explanation
    4  IPU                      | 0 | 1 | ...          (one column per IPU)
    5  Layers                   | COUNTIF over the IPU column
    6  Worst-tile bytes (sum)   | SUMIF of the layers' worst-tile bytes
    7  Headroom per tile        | budget - row 6
    8  Total (bytes)            | SUMIF of the layers' totals (summed over tiles)
    9  Total (MB)               | ROUND(row 8 / 10^6, 1)
    10 Fits the budget          | row 6 <= budget
    11 layer table header: Layer | IPU | Worst-tile bytes | five components | Total | Total MB | Cycles
    12... one row per layer

Adding the worst-tile bytes of the layers on an IPU bounds that IPU's worst
tile from above: the layers' worst tiles need not coincide, vertex code is
shared between layers, and not every layer's data is live at the same time.
The note on the sheet says so; ``popliner check`` computes the real figure.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import IO, TextIO

from popliner.errors import UsageProblem
from popliner.outputs.formula import (
    Arith,
    Cell,
    CellRef,
    Compare,
    Const,
    CountIf,
    Expr,
    Grid,
    RangeRef,
    Ref,
    Sum,
    SumIf,
    mb,
)
from popliner.outputs.rows import Breakdown, LayerRow
from popliner.outputs.tables import BYTES_FORMAT, COMPONENT_HEADERS, COUNT_FORMAT, MB_FORMAT, TableFormat, write_grid
from popliner.solvers.result import SplitResult

__all__ = ["PLANNER_NOTE", "PlannerLayout", "default_num_ipus", "planner_grid", "write_planner"]

PLANNER_TITLE = (
    "Split planner: type an IPU number for each layer in column B; the per-IPU figures above the table update."
)
PLANNER_NOTE = (
    "Per-IPU figures add up the layers' own figures, so they are an upper bound: code shared between "
    "layers and liveness peaks that do not coincide make the true stage figure smaller. "
    "Run `popliner check` on the chosen split for the exact figure."
)

# Fixed rows of the layout (see the module docstring).
BUDGET_ROW = 3
IPU_ROW = 4
COUNT_ROW = 5
WORST_ROW = 6
HEADROOM_ROW = 7
TOTAL_ROW = 8
MB_ROW = 9
FITS_ROW = 10
HEADER_ROW = 11
FIRST_LAYER_ROW = 12

# Columns of the layer table.
LAYER_COL = 1
IPU_COL = 2
WORST_COL = 3
FIRST_COMPONENT_COL = 4
TOTAL_COL = 9
MB_COL = 10
CYCLES_COL = 11


@dataclass(frozen=True)
class PlannerLayout:
    """Where the planner's interesting cells are, for styling and for tests."""

    budget: CellRef
    unplaced: CellRef
    num_ipus: int
    ipu_numbers: RangeRef  # row 4, one cell per IPU
    layer_counts: RangeRef
    worst_sums: RangeRef
    headroom: RangeRef
    totals: RangeRef
    fits: RangeRef
    header_row: int
    first_layer_row: int
    last_layer_row: int  # < first_layer_row when there are no layers

    @property
    def has_layers(self) -> bool:
        return self.last_layer_row >= self.first_layer_row

    def ipu_cell(self, layer_index: int) -> CellRef:
        """The editable IPU cell of the ``layer_index``-th layer (0-based)."""
        return CellRef(self.first_layer_row + layer_index, IPU_COL)

    def layer_column(self, col: int) -> RangeRef:
        """A column of the layer table as an absolute range (only when there are layers)."""
        first = CellRef(self.first_layer_row, col, abs_row=True, abs_col=True)
        return RangeRef(first, CellRef(self.last_layer_row, col, abs_row=True, abs_col=True))


def default_num_ipus(breakdown: Breakdown, budget_bytes: int, split: SplitResult | None) -> int:
    """How many IPU columns the planner offers.

    With a split: every IPU it requested or used. Without: enough IPUs for the
    summed worst-tile figures to fit (the upper bound), at most one per layer.
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
    name: str = "Split planner",
) -> tuple[Grid, PlannerLayout]:
    """Build the planner sheet. IPUs come from ``split`` when given, else every layer is on IPU 0.

    A layer the split does not place is left blank, so it shows up in the
    "layers on no listed IPU" count instead of silently landing on IPU 0.
    """
    if budget_bytes <= 0:
        raise UsageProblem(f"the per-tile budget must be positive, got {budget_bytes}")
    ipus = num_ipus if num_ipus is not None else default_num_ipus(breakdown, budget_bytes, split)
    if ipus < 1:
        raise UsageProblem(f"the planner needs at least one IPU, got {ipus}")
    layout = _layout(len(breakdown.layers), ipus)
    grid = Grid(name, column_formats=_layer_formats())
    grid.append([PLANNER_TITLE], style="title")
    grid.append([PLANNER_NOTE], style="note")
    _add_budget_row(grid, layout, budget_bytes, len(breakdown.layers))
    _add_ipu_rows(grid, layout)
    _add_layer_table(grid, breakdown.layers, split)
    return grid, layout


def _layout(n_layers: int, ipus: int) -> PlannerLayout:
    def ipu_row(row: int) -> RangeRef:
        return RangeRef(CellRef(row, 2), CellRef(row, 1 + ipus))

    return PlannerLayout(
        budget=CellRef(BUDGET_ROW, 2, abs_row=True, abs_col=True),
        unplaced=CellRef(BUDGET_ROW, 3),
        num_ipus=ipus,
        ipu_numbers=ipu_row(IPU_ROW),
        layer_counts=ipu_row(COUNT_ROW),
        worst_sums=ipu_row(WORST_ROW),
        headroom=ipu_row(HEADROOM_ROW),
        totals=ipu_row(TOTAL_ROW),
        fits=ipu_row(FITS_ROW),
        header_row=HEADER_ROW,
        first_layer_row=FIRST_LAYER_ROW,
        last_layer_row=FIRST_LAYER_ROW + n_layers - 1,
    )


def _layer_formats() -> dict[int, str]:
    formats = {IPU_COL: COUNT_FORMAT, WORST_COL: BYTES_FORMAT, MB_COL: MB_FORMAT, CYCLES_COL: BYTES_FORMAT}
    formats.update({c: BYTES_FORMAT for c in range(FIRST_COMPONENT_COL, TOTAL_COL + 1)})
    return formats


def _add_budget_row(grid: Grid, layout: PlannerLayout, budget_bytes: int, n_layers: int) -> None:
    # The unplaced count goes before its explanation so the text can spill
    # into the empty cells on its right instead of being cut off.
    placed = Sum((layout.layer_counts,))
    grid.put(BUDGET_ROW, 1, "Budget per tile (bytes)")
    grid.put(BUDGET_ROW, 2, budget_bytes, fmt=BYTES_FORMAT)
    grid.put(BUDGET_ROW, 3, Arith(Const(n_layers), "-", placed), fmt=COUNT_FORMAT)
    grid.put(BUDGET_ROW, 4, "layer(s) on no IPU listed below: give each layer an IPU from row 4")
    grid.set_style(BUDGET_ROW, "params")


def _ipu_summary(layout: PlannerLayout, row: int, col: int) -> Expr:
    """The formula of one per-IPU cell (``row`` picks the figure)."""
    ipu = Ref(CellRef(IPU_ROW, col, abs_row=True))
    budget = Ref(layout.budget)
    if row == HEADROOM_ROW:
        return Arith(budget, "-", Ref(CellRef(WORST_ROW, col)))
    if row == MB_ROW:
        return mb(CellRef(TOTAL_ROW, col))
    if row == FITS_ROW:
        return Compare(Ref(CellRef(WORST_ROW, col)), "<=", budget)
    if not layout.has_layers:
        return Const(0)
    if row == COUNT_ROW:
        return CountIf(layout.layer_column(IPU_COL), ipu)
    source = WORST_COL if row == WORST_ROW else TOTAL_COL
    return SumIf(layout.layer_column(IPU_COL), ipu, layout.layer_column(source))


_SUMMARY_ROWS: dict[int, tuple[str, str | None]] = {
    COUNT_ROW: ("Layers", COUNT_FORMAT),
    WORST_ROW: ("Worst-tile bytes (sum over its layers)", BYTES_FORMAT),
    HEADROOM_ROW: ("Headroom per tile (bytes)", BYTES_FORMAT),
    TOTAL_ROW: ("Total (bytes, summed over tiles)", BYTES_FORMAT),
    MB_ROW: ("Total (MB)", MB_FORMAT),
    FITS_ROW: ("Fits the budget (upper bound)", None),
}


def _add_ipu_rows(grid: Grid, layout: PlannerLayout) -> None:
    grid.put(IPU_ROW, 1, "IPU")
    grid.set_style(IPU_ROW, "header")
    for ipu in range(layout.num_ipus):
        grid.put(IPU_ROW, 2 + ipu, ipu, fmt=COUNT_FORMAT)
    for row, (label, fmt) in _SUMMARY_ROWS.items():
        grid.put(row, 1, label)
        for ipu in range(layout.num_ipus):
            grid.put(row, 2 + ipu, _ipu_summary(layout, row, 2 + ipu), fmt=fmt)


def _add_layer_table(grid: Grid, layers: tuple[LayerRow, ...], split: SplitResult | None) -> None:
    header = ["Layer", "IPU", "Worst-tile bytes", *COMPONENT_HEADERS, "Total (bytes)", "Total (MB)", "Cycles"]
    for col, title in enumerate(header, start=1):
        grid.put(HEADER_ROW, col, title)
    grid.set_style(HEADER_ROW, "header")
    placement = split.ipu_of_layer if split is not None else {}
    for layer in layers:
        row = grid.n_rows + 1
        ipu: Cell = placement.get(layer.layer) if split is not None else 0
        total = Sum((RangeRef(CellRef(row, FIRST_COMPONENT_COL), CellRef(row, TOTAL_COL - 1)),))
        cells: list[Cell] = [layer.layer, ipu, layer.worst_tile_bytes, *layer.memory.as_tuple()]
        grid.append([*cells, total, mb(CellRef(row, TOTAL_COL)), layer.cycles])


def write_planner(
    breakdown: Breakdown,
    stream: TextIO | IO[str],
    fmt: TableFormat = "csv",
    *,
    budget_bytes: int,
    split: SplitResult | None = None,
    num_ipus: int | None = None,
) -> None:
    """The planner as a table: TSV keeps the SUMIF/COUNTIF formulas, CSV their values.

    Pasted into a spreadsheet at A1, the TSV behaves like the workbook's sheet
    (minus highlighting and validation).
    """
    grid, _ = planner_grid(breakdown, budget_bytes=budget_bytes, split=split, num_ipus=num_ipus)
    write_grid(grid, stream, fmt)
