"""The split planner read back as a spreadsheet would: the tests' reader of the sheet popliner writes."""

from __future__ import annotations

from collections.abc import Mapping

from popliner.breakdown import Breakdown
from popliner.config.workbook import IPU_COL
from popliner.writers.planner import STATUS_ROW, WORST_ROW, planner_grid, ranges_grid, training_assumed


def planner_figures(breakdown: Breakdown, ipu_of_layer: Mapping[str, int], *, budget_bytes: int,
                    num_ipus: int) -> tuple[list[int], bool]:
    """The planner's worst-tile bytes per IPU for a split typed into its IPU column, and whether exact.

    Evaluated by popliner's own formula layer over the planner and Pipeline
    figures sheets, as a spreadsheet would (the tests also recalculate the
    written workbook with independent engines).
    """
    grid, layout = planner_grid(breakdown, budget_bytes=budget_bytes, num_ipus=num_ipus)
    book = {grid.name: grid}
    if breakdown.ranges is not None:
        ranges = ranges_grid(breakdown.ranges, assumes=training_assumed(breakdown))
        book[ranges.name] = ranges
    for k, layer in enumerate(breakdown.layers):
        grid.put(layout.first_layer_row + k, IPU_COL, ipu_of_layer.get(layer.layer))
    figures = [grid.value(WORST_ROW, 2 + ipu, book) for ipu in range(num_ipus)]
    exact = grid.value(STATUS_ROW, 3, book)
    return [int(v) for v in figures if isinstance(v, (int, float))], bool(exact)
