"""CSV and TSV review tables: operations, layers, memory totals, layer matrices.

Each table is first built as a :class:`~popliner.writers.formula.Grid`, the
same grid the XLSX workbook uses, then written row by row. What CSV and TSV
hold, the escaping of formula-like text and the dialects: docs/spreadsheets.md
('CSV and TSV'). The writers take an open text stream; the caller opens it,
normally with :func:`open_table`.
"""

from __future__ import annotations

import contextlib
import csv
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import IO, Literal, TextIO

from popliner.breakdown import Breakdown, LayerMatrix, LayerRow, OperationRow, TotalsRow
from popliner.errors import UsageProblem
from popliner.fileio import atomic_write
from popliner.memory.types import COMPONENT_TITLES, COMPONENTS, OTHER
from popliner.solvers.result import SplitResult
from popliner.writers.formula import (
    Arith,
    Cell,
    CellRef,
    RangeRef,
    Ref,
    Sum,
    Value,
    mb,
    sum_range,
)
from popliner.writers.grid import Book, Grid
from popliner.writers.writer import Functions

__all__ = [
    "CSV",
    "TSV",
    "Tables",
    "BYTES_FORMAT",
    "COMPONENT_HEADERS",
    "COUNT_FORMAT",
    "FORMULA_TRIGGERS",
    "MB_FORMAT",
    "TableFormat",
    "append_operation",
    "escape_text",
    "layers_grid",
    "matrix_grid",
    "open_table",
    "operations_grid",
    "totals_grid",
    "write_grid",
    "write_grids",
    "write_layers",
    "write_matrix",
    "write_operations",
    "write_totals",
]

TableFormat = Literal["csv", "tsv"]

#: Number formats the XLSX writer applies (bytes with thousands separators, MB with one decimal).
BYTES_FORMAT = "#,##0"
MB_FORMAT = "0.0"
COUNT_FORMAT = "0"

#: Leading characters that make a spreadsheet program read text as a formula.
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")

#: Column titles of the five components, in report order.
COMPONENT_HEADERS: tuple[str, ...] = tuple(f"{COMPONENT_TITLES[c]} (bytes)" for c in COMPONENTS)
#: Column title of the sixth component, shown only for a profile with other compiler categories.
OTHER_HEADER = f"{COMPONENT_TITLES[OTHER]} (bytes)"


def component_headers(with_other: bool) -> tuple[str, ...]:
    """The component columns of a table: the five, and the other categories when the profile has them."""
    return (*COMPONENT_HEADERS, OTHER_HEADER) if with_other else COMPONENT_HEADERS


def escape_text(text: str) -> str:
    """Prefix ``'`` to text a spreadsheet would otherwise evaluate (CSV injection)."""
    return "'" + text if text.startswith(FORMULA_TRIGGERS) else text


def _dialect(fmt: str) -> type[csv.Dialect]:
    if fmt == "csv":
        return csv.excel
    if fmt == "tsv":
        return csv.excel_tab
    raise UsageProblem(f"unknown table format {fmt!r}; use csv or tsv")


# ---------------------------------------------------------------------------
# Grids


def operations_grid(breakdown: Breakdown, name: str = "Operations") -> Grid:
    """One row per operation (in the breakdown's order), a row total and a column-total row.

    Columns: Layer, Note, Operation, the five components (D-H), Total (I);
    with other compiler categories, they are column I and Total is J.
    """
    k = len(component_headers(breakdown.has_other))
    grid = Grid(name, column_formats={c: BYTES_FORMAT for c in range(4, 5 + k)})
    grid.append(["Layer", "Note", "Operation", *component_headers(breakdown.has_other), "Total (bytes)"],
                style="header")
    for op in breakdown.operations:
        append_operation(grid, op, breakdown.has_other)
    last = grid.n_rows
    sums = (sum_range(col, 2, last) for col in range(4, 5 + k))
    grid.append([SUM_OF_OPERATIONS, None, None, *sums], style="total")
    return grid


#: Labels of total rows: each says what was added, because no sum of parts is the model's total.
SUM_OF_OPERATIONS = "Sum of the operations"
SUM_OF_ROWS = "Sum of the rows above"
LAYERS_NOTE = (
    "A sum of per-layer figures is not the model's total: code and variables that several layers use count "
    "once per layer in it. The whole-model row counts them once, with every variable of the profile: it is the "
    "model's total, the same figure as the Totals table's."
)


def append_operation(grid: Grid, op: OperationRow, with_other: bool) -> int:
    row = grid.n_rows + 1
    parts = op.memory.as_tuple(with_other)
    return grid.append(
        [op.layer, op.note, op.name, *parts, _row_sum(row, 4, 3 + len(parts))],
    )


def _row_sum(row: int, first_col: int, last_col: int) -> Cell:
    return Sum((RangeRef(CellRef(row, first_col), CellRef(row, last_col)),))


def layers_grid(breakdown: Breakdown, name: str = "Layers") -> Grid:
    """One row per layer: operations, components (C-G), Total (H), Total MB (I), worst tile, cycles.

    The "(no layer)" row first and the three rows below the layers, with why the
    worst-tile columns of their sum stay blank: docs/spreadsheets.md ('Layers').
    """
    other = breakdown.has_other
    x = len(component_headers(other)) - len(COMPONENT_HEADERS)  # columns after the five move right by x
    formats = {2: COUNT_FORMAT, **{c: BYTES_FORMAT for c in range(3, 9 + x)}, 9 + x: MB_FORMAT}
    formats.update({10 + x: COUNT_FORMAT, 11 + x: BYTES_FORMAT, 12 + x: BYTES_FORMAT})
    grid = Grid(name, column_formats=formats)
    header = ["Layer", "Operations", *component_headers(other), "Total (bytes)", "Total (MB)"]
    grid.append([*header, "Worst tile", "Worst-tile bytes", "Cycles"], style="header")
    if breakdown.unlayered is not None:
        _append_layer(grid, breakdown.unlayered, other)
    for layer in breakdown.layers:
        _append_layer(grid, layer, other)
    last = grid.n_rows
    row = last + 1
    sums = [sum_range(col, 2, last) for col in range(2, 9 + x)]
    grid.append([SUM_OF_ROWS, *sums, mb(CellRef(row, 8 + x)), None, None, sum_range(12 + x, 2, last)],
                style="total")
    if breakdown.whole is not None:
        _append_layer(grid, breakdown.whole, other, style="total")
        grid.append([LAYERS_NOTE], style="note")
    return grid


def _append_layer(grid: Grid, layer: LayerRow, with_other: bool, style: str = "data") -> int:
    row = grid.n_rows + 1
    parts = layer.memory.as_tuple(with_other)
    end = 2 + len(parts)  # the last component's column
    cells: list[Cell] = [layer.layer, layer.num_operations, *parts]
    cells += [_row_sum(row, 3, end), mb(CellRef(row, end + 1)), layer.worst_tile, layer.worst_tile_bytes,
              layer.cycles]
    return grid.append(cells, style=style)


def totals_grid(totals: Sequence[TotalsRow], name: str = "Totals") -> Grid:
    """Category, model figure, ground truth (blank when absent), difference = model - ground truth."""
    grid = Grid(name, column_formats={c: BYTES_FORMAT for c in range(2, 5)})
    grid.append(["Category", "Model (bytes)", "Ground truth (bytes)", "Difference (bytes)"], style="header")
    for total in totals:
        row = grid.n_rows + 1
        difference: Cell = None
        if total.ground_truth is not None:
            difference = Arith(Ref(CellRef(row, 2)), "-", Ref(CellRef(row, 3)))
        grid.append([total.category, total.model, total.ground_truth, difference])
    return grid


def matrix_grid(matrix: LayerMatrix, name: str | None = None) -> Grid:
    """The square matrix with the title in A1, a Total column and a Total row."""
    size = len(matrix.layers)
    if matrix.values.shape != (size, size):
        raise ValueError(f"{matrix.title}: values shape {matrix.values.shape} does not match {size} layers")
    grid = Grid(name or matrix.title, column_formats={c: BYTES_FORMAT for c in range(2, size + 3)})
    grid.append([matrix.title, *matrix.layers, "Total"], style="header")
    for i, layer in enumerate(matrix.layers):
        row = grid.n_rows + 1
        values = [int(v) for v in matrix.values[i]]
        grid.append([layer, *values, _row_sum(row, 2, size + 1)])
    last = grid.n_rows
    grid.append([SUM_OF_ROWS, *(sum_range(col, 2, last) for col in range(2, size + 3))], style="total")
    return grid


# ---------------------------------------------------------------------------
# Writing


def _plain(value: Value) -> str | int | float:
    """A value as the csv module should write it."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, str):
        return escape_text(value)
    return value


def write_grid(grid: Grid, stream: TextIO | IO[str], fmt: TableFormat, *, first_row: int = 1,
               book: Book | None = None) -> None:
    """Write ``grid`` as CSV (values) or TSV (formulas); rows padded to the widest.

    ``first_row`` is the line of the stream (1-based) the grid's first row
    lands on; TSV formulas are moved down to match, so they point at the
    grid's own cells once the stream is pasted into a spreadsheet at A1.
    ``book`` holds the other sheets the grid's formulas read (CSV values).
    """
    writer = csv.writer(stream, dialect=_dialect(fmt))
    width = grid.n_cols
    for row in range(1, grid.n_rows + 1):
        cells: list[str | int | float] = []
        for col in range(1, width + 1):
            formula = grid.formula_text(row, col, first_row - 1) if fmt == "tsv" else None
            cells.append(formula if formula is not None else _plain(grid.value(row, col, book)))
        writer.writerow(cells)


def write_grids(grids: Sequence[Grid], stream: TextIO | IO[str], fmt: TableFormat) -> None:
    """Several tables in one stream, a blank line between them, each one's formulas on its own rows."""
    blank = csv.writer(stream, dialect=_dialect(fmt))
    line = 1
    for k, grid in enumerate(grids):
        if k:
            blank.writerow([])  # a blank row between tables
            line += 1
        write_grid(grid, stream, fmt, first_row=line)
        line += grid.n_rows


def write_operations(breakdown: Breakdown, stream: TextIO | IO[str], fmt: TableFormat = "csv") -> None:
    """The operation breakdown: one row per operation, then the column totals."""
    write_grid(operations_grid(breakdown), stream, fmt)


def write_layers(breakdown: Breakdown, stream: TextIO | IO[str], fmt: TableFormat = "csv") -> None:
    """The layer breakdown: one row per layer, then the column totals."""
    write_grid(layers_grid(breakdown), stream, fmt)


def write_totals(breakdown: Breakdown, stream: TextIO | IO[str], fmt: TableFormat = "csv") -> None:
    """The memory totals: model figure against the profile's ground truth."""
    write_grid(totals_grid(breakdown.totals), stream, fmt)


def write_matrix(matrix: LayerMatrix, stream: TextIO | IO[str], fmt: TableFormat = "csv") -> None:
    """A layer x layer matrix (affinity or interlayer traffic) with row and column totals."""
    write_grid(matrix_grid(matrix), stream, fmt)


def open_table(path: str | os.PathLike[str], *, force: bool) -> contextlib.AbstractContextManager[IO[str]]:
    """An atomic text stream for one table, with the ``newline=""`` the csv module needs."""
    return atomic_write(path, force=force, newline="")


@dataclass(frozen=True)
class Tables:
    """The review tables a run asks for: what ``-o FILE`` (or stdout) gets from the main command.

    CSV and TSV write the tables asked for, one after the other; the workbook writes every table (and
    the split planner: ``split`` prefills it, ``num_ipus`` sets its IPU columns, ``budget_bytes`` is what
    it compares against).
    """

    breakdown: Breakdown
    operations: bool = False
    layers: bool = True
    totals: bool = False
    matrices: tuple[LayerMatrix, ...] = ()
    split: SplitResult | None = None
    budget_bytes: int = 0
    num_ipus: int | None = None

    def grids(self) -> list[Grid]:
        """The CSV/TSV tables, in the order they are written."""
        out = [grid(self.breakdown) for wanted, grid in ((self.operations, operations_grid),
                                                         (self.layers, layers_grid)) if wanted]
        if self.totals:
            out.append(totals_grid(self.breakdown.totals))
        out.extend(matrix_grid(matrix) for matrix in self.matrices)
        return out


def _writer(fmt: TableFormat) -> Callable[[Tables, IO[str]], None]:
    def write(tables: Tables, stream: IO[str]) -> None:
        # One stream, several tables: each table's TSV formulas point at its own rows.
        write_grids(tables.grids(), stream, fmt)

    return write


#: The csv module writes its own line ends (newline="").
CSV: Functions = {"Tables": _writer("csv")}
TSV: Functions = {"Tables": _writer("tsv")}
