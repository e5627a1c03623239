"""The review workbook (XLSX, XlsxWriter): Operations, Layers, Split planner, Totals, matrices.

Every sheet is a :class:`~popliner.writers.formula.Grid`, the same objects
the CSV/TSV writers use, so derived cells are live formulas that evaluate to
the figures popliner reports. This module only places the grids in a
workbook and makes them readable: frozen headers, column widths, number
formats, outline groups, the planner's highlighting and input validation.
Why each formula cell also stores its value, and the booleans' number format:
docs/spreadsheets.md ('The workbook').
"""

from __future__ import annotations

import datetime
import io
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from popliner.breakdown import Breakdown, LayerMatrix, OperationRow
from popliner.config.workbook import IPU_COL
from popliner.errors import UsageProblem
from popliner.solvers.result import SplitResult
from popliner.writers.formats import writer_for
from popliner.writers.formula import (
    CellRef,
    FormulaError,
    RangeRef,
    Value,
    mb,
    sum_range,
)
from popliner.writers.grid import Grid, evaluate_book
from popliner.writers.planner import (
    IPU_ROW,
    RANGES_SHEET,
    RUN_COL,
    WORST_COL,
    PlannerLayout,
    planner_grid,
    ranges_grid,
    training_assumed,
)
from popliner.writers.tables import (
    BYTES_FORMAT,
    COMPONENT_HEADERS,
    FORMULA_TRIGGERS,
    MB_FORMAT,
    SUM_OF_OPERATIONS,
    Tables,
    append_operation,
    component_headers,
    layers_grid,
    matrix_grid,
    totals_grid,
)
from popliner.writers.writer import Functions, write_output

if TYPE_CHECKING:  # XlsxWriter is imported when a workbook is written, not by every command that maps suffixes
    from xlsxwriter.format import Format
    from xlsxwriter.workbook import Workbook
    from xlsxwriter.worksheet import Worksheet

__all__ = ["BOOL_FORMAT", "XLSX", "grouped_operations_grid", "workbook_grids", "write_workbook"]

NO_LAYER = "(no layer)"
_SHEET_MAX = 31
_MAX_WIDTH = 48
_MIN_WIDTH = 6
# Characters Excel forbids in sheet names.
_BAD_SHEET_CHARS = re.compile(r"[\[\]:*?/\\]")


# ---------------------------------------------------------------------------
# Grids


def grouped_operations_grid(breakdown: Breakdown, name: str = "Operations") -> Grid:
    """Operations grouped by layer (layer order, then operation order).

    The layout, and why group sums have columns of their own: docs/spreadsheets.md
    ('The workbook', **Operations**).
    """
    other = breakdown.has_other
    x = len(component_headers(other)) - len(COMPONENT_HEADERS)  # columns after the five move right by x
    grid = Grid(name, column_formats={**{c: BYTES_FORMAT for c in range(4, 11 + x)}, 11 + x: MB_FORMAT})
    header = ["Layer", "Note", "Operation", *component_headers(other), "Total (bytes)"]
    grid.append([*header, "Sum of its operations (bytes)", "Sum of its operations (MB)"], style="header")
    for label, ops in _operations_by_layer(breakdown):
        _append_group(grid, label, ops, other)
    last = grid.n_rows
    row = last + 1
    sums = [sum_range(col, 2, last) for col in range(4, 11 + x)]
    grid.append([SUM_OF_OPERATIONS, None, None, *sums, mb(CellRef(row, 10 + x))], style="total")
    grid.append([OPERATIONS_NOTE], style="note")
    return grid


#: Why the Operations sheet's sums exceed the Layers sheet's figures.
OPERATIONS_NOTE = (
    "Each operation's figure counts all the code and variables it uses, so code and variables shared by "
    "several operations count once per operation in these sums; the Layers sheet counts them once per layer."
)


def _operations_by_layer(breakdown: Breakdown) -> list[tuple[str, list[OperationRow]]]:
    known = [layer.layer for layer in breakdown.layers]
    groups: dict[str, list[OperationRow]] = {name: [] for name in known}
    stray: list[OperationRow] = []
    for op in sorted(breakdown.operations, key=lambda o: o.position):
        (stray if op.layer is None else groups.get(op.layer, stray)).append(op)
    ordered = [(name, groups[name]) for name in known if groups[name]]
    return ([(NO_LAYER, stray)] if stray else []) + ordered


def _append_group(grid: Grid, label: str, ops: list[OperationRow], with_other: bool) -> None:
    head = grid.n_rows + 1
    first, last = head + 1, head + len(ops)
    count = f"{len(ops)} operation{'s' if len(ops) != 1 else ''}"
    k = len(component_headers(with_other))
    layer_total = sum_range(4 + k, first, last)
    grid.append([label, None, count, *([None] * (k + 1)), layer_total, mb(CellRef(head, 5 + k))], style="group")
    for op in ops:
        append_operation(grid, op, with_other)


def workbook_grids(
    breakdown: Breakdown,
    *,
    budget_bytes: int,
    split: SplitResult | None = None,
    matrices: Sequence[LayerMatrix] = (),
    num_ipus: int | None = None,
) -> tuple[list[Grid], PlannerLayout]:
    """The workbook's sheets in order, and where the planner's cells are."""
    planner, layout = planner_grid(breakdown, budget_bytes=budget_bytes, split=split, num_ipus=num_ipus)
    grids = [grouped_operations_grid(breakdown), layers_grid(breakdown), planner, totals_grid(breakdown.totals)]
    taken = {g.name.casefold() for g in grids} | {RANGES_SHEET.casefold()}
    for matrix in matrices:
        name = _sheet_name(matrix.sheet or matrix.title, taken)
        taken.add(name.casefold())
        grids.append(matrix_grid(matrix, name))
    if breakdown.ranges is not None:
        grids.append(ranges_grid(breakdown.ranges, assumes=training_assumed(breakdown)))
    return grids, layout


def _sheet_name(title: str, taken: set[str]) -> str:
    """A legal, unused sheet name from a matrix title (<= 31 chars, none of []:*?/\\).

    A long title is cut at a word boundary (and without a dangling bracket),
    never mid-word.
    """
    base = _short(_BAD_SHEET_CHARS.sub(" ", title).strip().strip("'")) or "Matrix"
    name, number = base, 2
    while name.casefold() in taken:
        suffix = f" ({number})"
        name, number = _short(base, _SHEET_MAX - len(suffix)) + suffix, number + 1
    return name


def _short(text: str, limit: int = _SHEET_MAX) -> str:
    """``text`` cut to whole words within ``limit`` characters, an unclosed bracket part dropped."""
    if len(text) <= limit:
        return text
    words = text.split()
    out = ""
    for word in words:
        candidate = f"{out} {word}".strip()
        if len(candidate) > limit:
            break
        out = candidate
    if "(" in out and ")" not in out[out.rindex("("):]:
        out = out[: out.rindex("(")].rstrip()
    return out or text[:limit]


# ---------------------------------------------------------------------------
# Writing


def write_workbook(
    breakdown: Breakdown,
    path: str | os.PathLike[str],
    *,
    force: bool,
    split: SplitResult | None = None,
    matrices: Sequence[LayerMatrix] = (),
    budget_bytes: int,
    num_ipus: int | None = None,
) -> None:
    """Write the review workbook to ``path`` (atomically; an existing file only with ``force``).

    ``budget_bytes`` is the per-tile budget the planner compares against;
    ``split`` prefills the planner's IPU column; ``num_ipus`` overrides how
    many IPU columns the planner offers.
    """
    target = Path(path)
    if target.suffix.lower() != ".xlsx":
        raise UsageProblem(f"{target}: a workbook file name must end in .xlsx")
    tables = Tables(breakdown, matrices=tuple(matrices), split=split, budget_bytes=budget_bytes, num_ipus=num_ipus)
    write_output(tables, os.fspath(target), force, writer_for(None, "Tables", "xlsx"))


#: Document dates written instead of the time of saving, so reruns give identical bytes.
_FIXED_DATE = datetime.datetime(2000, 1, 1, tzinfo=datetime.timezone.utc)
_ERROR_CODES = ("#DIV/0!", "#N/A", "#NAME?", "#NULL!", "#NUM!", "#REF!", "#VALUE!")
#: Shows a boolean formula result as TRUE/FALSE in programs that would show 1/0.
BOOL_FORMAT = '"TRUE";"TRUE";"FALSE"'


def _write_tables(tables: Tables, stream: IO[bytes]) -> None:
    """The workbook of the tables; the same tables always give the same bytes.

    XlsxWriter stamps zip entries with a fixed date; the document's creation
    date is fixed here.
    """
    from xlsxwriter.workbook import Workbook

    grids, layout = workbook_grids(tables.breakdown, budget_bytes=tables.budget_bytes, split=tables.split,
                                   matrices=tables.matrices, num_ipus=tables.num_ipus)
    buffer = io.BytesIO()
    book = Workbook(buffer, {"in_memory": True, "strings_to_formulas": False, "strings_to_urls": False,
                             "strings_to_numbers": False})
    book.set_properties({"creator": "popliner", "created": _FIXED_DATE})
    book.set_calc_mode("auto")
    styles = _Styles(book)
    values = evaluate_book(grids)
    sheets = {grid.name: book.add_worksheet(grid.name) for grid in grids}
    for grid in grids:
        _fill(sheets[grid.name], grid, values[grid.name], styles)
        _set_widths(sheets[grid.name], grid, values[grid.name], styles)
    _decorate_operations(sheets[grids[0].name], grids[0])
    _decorate_table(sheets[grids[1].name], grids[1], freeze=(1, 1))
    _decorate_planner(sheets[grids[2].name], layout, styles)
    for grid in grids[3:]:
        _decorate_table(sheets[grid.name], grid, freeze=(1, 1), autofilter=False)
    book.close()
    stream.write(buffer.getvalue())


XLSX: Functions = {"Tables": _write_tables}


class _Styles:
    """XlsxWriter formats, one per (row style, number format), made once per workbook."""

    def __init__(self, book: Workbook) -> None:
        self._book = book
        self._made: dict[tuple[str, str | None, bool], Format] = {}

    def get(self, style: str, number_format: str | None, quote: bool = False) -> Format:
        key = (style, number_format, quote)
        if key not in self._made:
            props: dict[str, Any] = dict(_STYLE_PROPS.get(style, {}))
            if number_format is not None:
                props["num_format"] = number_format
            if quote:
                props["quote_prefix"] = True
            self._made[key] = self._book.add_format(props)
        return self._made[key]

    def fill(self, colour: str) -> Format:
        return self.get(f"fill:{colour}", None)


_STYLE_PROPS: dict[str, dict[str, Any]] = {
    "header": {"bold": True, "bg_color": "#DDE3EA", "bottom": 1, "text_wrap": True, "valign": "top"},
    "group": {"bold": True, "bg_color": "#EEF2F7"},
    "total": {"bold": True, "top": 1},
    "title": {"bold": True, "font_size": 13},
    "note": {"italic": True, "font_color": "#555555"},
    "fill:over": {"bg_color": "#F4B6B6"},
    "fill:input": {"bg_color": "#FFF6CC"},
    "fill:warn": {"bg_color": "#FCD9A8"},
}


def _fill(sheet: Worksheet, grid: Grid, values: list[list[Value | FormulaError]], styles: _Styles) -> None:
    for row in range(1, grid.n_rows + 1):
        style = grid.style(row)
        for col, cell in enumerate(grid.row_cells(row), start=1):
            if cell is None:
                continue
            value = values[row - 1][col - 1]
            fmt = grid.number_format(row, col) if not isinstance(value, str) else None
            if isinstance(value, bool):
                fmt = BOOL_FORMAT
            formula = grid.formula_text(row, col)
            r, c = row - 1, col - 1
            if formula is not None:
                sheet.write_formula(r, c, formula, styles.get(style, fmt), _cached(value))
            elif isinstance(cell, str):
                text = _ILLEGAL_XML.sub("?", cell)
                sheet.write_string(r, c, text, styles.get(style, None, quote=text.startswith(FORMULA_TRIGGERS)))
            elif isinstance(cell, bool):
                sheet.write_boolean(r, c, cell, styles.get(style, fmt))
            else:
                sheet.write_number(r, c, cell, styles.get(style, fmt))


def _cached(value: Value | FormulaError) -> Value:
    """A formula's value as XlsxWriter stores it (blank as "", an error as its code)."""
    if isinstance(value, FormulaError):
        code = str(value).split(":", 1)[0]
        return code if code in _ERROR_CODES else "#VALUE!"
    return "" if value is None else value


# Characters XML 1.0 cannot carry (XlsxWriter would write them and spoil the file): each is written as "?".
_ILLEGAL_XML = re.compile(r"[\000-\010]|[\013-\014]|[\016-\037]")


def _display_width(value: Value | FormulaError) -> int:
    """Roughly how many characters a value takes once formatted."""
    if value is None or isinstance(value, FormulaError):
        return 0 if value is None else 7
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return len(f"{value:,}")
    if isinstance(value, float):
        return len(f"{value:,.1f}")
    return len(value)


# Rows whose text may spill over empty cells to its right: their text must not widen a column.
_SPILL_STYLES = ("title", "note", "params")


def _set_widths(sheet: Worksheet, grid: Grid, values: list[list[Value | FormulaError]], styles: _Styles) -> None:
    """Column widths from the content, each column with its number format for cells typed in later."""
    widths: dict[int, int] = {}
    for row in range(1, grid.n_rows + 1):
        style = grid.style(row)
        for col, value in enumerate(values[row - 1], start=1):
            if style in _SPILL_STYLES and isinstance(value, str):
                continue
            width = _display_width(value)
            if style == "header":
                width = min(width, 18)  # headers wrap instead of widening numeric columns
            widths[col] = max(widths.get(col, 0), width)
    for col in sorted(set(widths) | set(grid.column_formats)):
        width = max(_MIN_WIDTH, min(_MAX_WIDTH, widths.get(col, 0) + 2))
        fmt = grid.column_formats.get(col)
        sheet.set_column(col - 1, col - 1, width, styles.get("data", fmt) if fmt else None)


def _decorate_table(sheet: Worksheet, grid: Grid, *, freeze: tuple[int, int], autofilter: bool = True) -> None:
    sheet.freeze_panes(*freeze)
    last_data = grid.n_rows
    while last_data > 1 and grid.style(last_data) in ("total", "note"):
        last_data -= 1
    if autofilter and last_data > 1:
        sheet.autofilter(0, 0, last_data - 1, grid.n_cols - 1)


def _decorate_operations(sheet: Worksheet, grid: Grid) -> None:
    """Freeze names and header; make each layer's operations a collapsible group."""
    _decorate_table(sheet, grid, freeze=(1, 3))
    sheet.outline_settings(True, False, True, False)  # the group row sits above its operations
    for row in range(2, grid.n_rows + 1):
        if grid.style(row) == "data":
            sheet.set_row(row - 1, None, None, {"level": 1})


def _decorate_planner(sheet: Worksheet, layout: PlannerLayout, styles: _Styles) -> None:
    """Freeze the per-IPU figures above the table, highlight overruns, validate the IPU column."""
    sheet.freeze_panes(layout.first_layer_row - 1, 2)
    budget = layout.budget.a1
    over, warn = styles.fill("over"), styles.fill("warn")
    sheet.conditional_format(layout.worst_sums.render(), {"type": "cell", "criteria": ">", "value": budget,
                                                          "format": over})
    sheet.conditional_format(layout.headroom.render(), {"type": "cell", "criteria": "<", "value": 0, "format": over})
    first_fit = layout.fits.first.a1
    sheet.conditional_format(layout.fits.render(), {"type": "formula", "criteria": f"={first_fit}=FALSE",
                                                    "format": over})
    sheet.conditional_format(layout.unplaced.a1, {"type": "cell", "criteria": ">", "value": 0, "format": warn})
    if not layout.has_layers:
        return
    sheet.conditional_format(_plain_range(layout.layer_column(WORST_COL)),
                             {"type": "cell", "criteria": ">", "value": budget, "format": over})
    sheet.autofilter(layout.header_row - 1, 0, layout.last_layer_row - 1, RUN_COL - 1)
    _validate_ipu_column(sheet, layout, styles)


def _validate_ipu_column(sheet: Worksheet, layout: PlannerLayout, styles: _Styles) -> None:
    column = _plain_range(layout.layer_column(IPU_COL))
    # The cells to edit are tinted (a rule, so that the cells keep their own number format).
    sheet.conditional_format(column, {"type": "formula", "criteria": "=TRUE", "format": styles.fill("input")})
    sheet.data_validation(column, {
        "validate": "integer",
        "criteria": "between",
        "minimum": 0,
        "maximum": layout.num_ipus - 1,
        "ignore_blank": True,
        "error_title": "IPU number",
        "error_message": f"Give an IPU number from 0 to {layout.num_ipus - 1} (the IPUs in row {IPU_ROW}).",
    })


def _plain_range(cells: RangeRef) -> str:
    """``B12:B40`` without ``$`` marks, as the rules take ranges."""
    return f"{cells.first.local().a1}:{cells.last.local().a1}"
