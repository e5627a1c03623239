"""The review workbook (XLSX, openpyxl): Operations, Layers, Split planner, Totals, matrices.

Every sheet is a :class:`~popliner.outputs.formula.Grid`, the same objects
the CSV/TSV writers use, so derived cells are live formulas that evaluate to
the figures popliner reports. This module only places the grids in a
workbook and makes them readable: frozen headers, column widths, number
formats, outline groups, the planner's highlighting and input validation.

openpyxl stores formulas without cached results, so the workbook asks the
spreadsheet program to recalculate everything when it is opened.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

from openpyxl import Workbook
from openpyxl.cell.cell import ILLEGAL_CHARACTERS_RE
from openpyxl.formatting.rule import CellIsRule, FormulaRule
from openpyxl.styles import Alignment, Border, Font, PatternFill, Side
from openpyxl.workbook.properties import CalcProperties
from openpyxl.worksheet.datavalidation import DataValidation
from openpyxl.worksheet.worksheet import Worksheet

from popliner.errors import UsageProblem
from popliner.fileio import atomic_write, check_writable
from popliner.outputs.formula import Cell, CellRef, Grid, RangeRef, Sum, Value, column_letter, mb, sum_range
from popliner.outputs.planner import IPU_COL, WORST_COL, PlannerLayout, planner_grid
from popliner.outputs.rows import Breakdown, LayerMatrix, OperationRow
from popliner.outputs.tables import (
    BYTES_FORMAT,
    COMPONENT_HEADERS,
    FORMULA_TRIGGERS,
    MB_FORMAT,
    layers_grid,
    matrix_grid,
    totals_grid,
)
from popliner.solvers.result import SplitResult

__all__ = ["build_workbook", "grouped_operations_grid", "workbook_grids", "write_workbook"]

NO_LAYER = "(no layer)"
_MAX_WIDTH = 48
_MIN_WIDTH = 6
# Characters Excel forbids in sheet names.
_BAD_SHEET_CHARS = re.compile(r"[\[\]:*?/\\]")

# Colours (ARGB without alpha prefix, as openpyxl takes them).
_HEADER_FILL = "DDE3EA"
_GROUP_FILL = "EEF2F7"
_INPUT_FILL = "FFF6CC"
_OVER_FILL = "F4B6B6"
_WARN_FILL = "FCD9A8"


# ---------------------------------------------------------------------------
# Grids


def grouped_operations_grid(breakdown: Breakdown, name: str = "Operations") -> Grid:
    """Operations grouped by layer (layer order, then operation order).

    Each layer starts with a group row holding the layer's total in columns J
    and K; its operations follow. Group totals live in their own columns so
    the grand total of columns D-I adds each operation exactly once.
    Operations of no (known) layer come last under "(no layer)".
    """
    grid = Grid(name, column_formats={**{c: BYTES_FORMAT for c in range(4, 11)}, 11: MB_FORMAT})
    header = ["Layer", "Note", "Operation", *COMPONENT_HEADERS, "Total (bytes)"]
    grid.append([*header, "Layer total (bytes)", "Layer total (MB)"], style="header")
    for label, ops in _operations_by_layer(breakdown):
        _append_group(grid, label, ops)
    last = grid.n_rows
    row = last + 1
    sums = [sum_range(col, 2, last) for col in range(4, 11)]
    grid.append(["Total", None, None, *sums, mb(CellRef(row, 10))], style="total")
    return grid


def _operations_by_layer(breakdown: Breakdown) -> list[tuple[str, list[OperationRow]]]:
    known = [layer.layer for layer in breakdown.layers]
    groups: dict[str, list[OperationRow]] = {name: [] for name in known}
    stray: list[OperationRow] = []
    for op in sorted(breakdown.operations, key=lambda o: o.position):
        (stray if op.layer is None else groups.get(op.layer, stray)).append(op)
    ordered = [(name, groups[name]) for name in known if groups[name]]
    return ordered + ([(NO_LAYER, stray)] if stray else [])


def _append_group(grid: Grid, label: str, ops: list[OperationRow]) -> None:
    head = grid.n_rows + 1
    first, last = head + 1, head + len(ops)
    count = f"{len(ops)} operation{'s' if len(ops) != 1 else ''}"
    layer_total = sum_range(9, first, last)
    grid.append([label, None, count, *([None] * 6), layer_total, mb(CellRef(head, 10))], style="group")
    for op in ops:
        row = grid.n_rows + 1
        total = Sum((RangeRef(CellRef(row, 4), CellRef(row, 8)),))
        grid.append([op.layer, op.note, op.name, *op.memory.as_tuple(), total])


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
    taken = {g.name.casefold() for g in grids}
    for matrix in matrices:
        name = _sheet_name(matrix.title, taken)
        taken.add(name.casefold())
        grids.append(matrix_grid(matrix, name))
    return grids, layout


def _sheet_name(title: str, taken: set[str]) -> str:
    """A legal, unused sheet name from a matrix title (<= 31 chars, none of []:*?/\\)."""
    base = _BAD_SHEET_CHARS.sub(" ", title).strip().strip("'")[:31] or "Matrix"
    name, number = base, 2
    while name.casefold() in taken:
        suffix = f" ({number})"
        name, number = base[: 31 - len(suffix)] + suffix, number + 1
    return name


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
    check_writable(target, force)  # fail before the work, not after
    grids, layout = workbook_grids(
        breakdown, budget_bytes=budget_bytes, split=split, matrices=matrices, num_ipus=num_ipus
    )
    book = build_workbook(grids, layout)
    buffer = io.BytesIO()
    book.save(buffer)
    with atomic_write(target, force=force, binary=True) as stream:
        stream.write(reproducible_xlsx(buffer.getvalue()))


#: Written into docProps/core.xml instead of the time of saving.
_FIXED_TIMESTAMP = "2000-01-01T00:00:00Z"
_TIMESTAMP = re.compile(rb"(<dcterms:(?:created|modified)[^>]*>)[^<]*(</dcterms:)")


def reproducible_xlsx(raw: bytes) -> bytes:
    """The same workbook with fixed zip-entry dates and document timestamps.

    openpyxl stamps the save time into the zip entries and the document
    properties; fixing both makes the same inputs give byte-identical files.
    """
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(raw)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename == "docProps/core.xml":
                data = _TIMESTAMP.sub(rb"\g<1>" + _FIXED_TIMESTAMP.encode() + rb"\g<2>", data)
            entry = zipfile.ZipInfo(info.filename, date_time=(1980, 1, 1, 0, 0, 0))
            entry.compress_type = zipfile.ZIP_DEFLATED
            entry.external_attr = 0o644 << 16
            dst.writestr(entry, data)
    return out.getvalue()


def build_workbook(grids: Sequence[Grid], layout: PlannerLayout) -> Workbook:
    """An openpyxl workbook of ``grids`` with styling; the planner gets its extras."""
    book = Workbook()
    book.remove(book.active)
    book.calculation = CalcProperties(fullCalcOnLoad=True)
    book.properties.creator = "popliner"
    for grid in grids:
        sheet = book.create_sheet(grid.name)
        _fill(sheet, grid)
        _set_widths(sheet, grid)
    _decorate_operations(book[grids[0].name], grids[0])
    _decorate_table(book[grids[1].name], grids[1], freeze="B2")
    _decorate_planner(book[grids[2].name], layout)
    for grid in grids[3:]:
        _decorate_table(book[grid.name], grid, freeze="B2", autofilter=False)
    return book


def _fill(sheet: Worksheet, grid: Grid) -> None:
    for row in range(1, grid.n_rows + 1):
        style = grid.style(row)
        for col, value in enumerate(grid.row_cells(row), start=1):
            if value is None:
                continue
            cell = sheet.cell(row=row, column=col)
            _set_value(cell, grid, row, col, value)
            fmt = grid.number_format(row, col)
            if fmt is not None and not isinstance(value, str):
                cell.number_format = fmt
            _style_cell(cell, style)


def _set_value(cell: object, grid: Grid, row: int, col: int, value: Cell) -> None:
    formula = grid.formula_text(row, col)
    if formula is not None:
        cell.value = formula  # type: ignore[attr-defined]
    elif isinstance(value, str):
        _set_text(cell, value)
    else:
        cell.value = value  # type: ignore[attr-defined]


def _set_text(cell: object, text: str) -> None:
    """Store text as text, even when it looks like a formula.

    openpyxl turns any string starting with "=" into a formula, so such names
    are forced back to a string cell and marked with Excel's quote prefix (the
    hidden ``'`` a user would type), which also keeps them text when edited.
    """
    text = ILLEGAL_CHARACTERS_RE.sub("?", text)
    cell.value = text  # type: ignore[attr-defined]
    if text.startswith(FORMULA_TRIGGERS):
        cell.data_type = "s"  # type: ignore[attr-defined]
        cell.quotePrefix = True  # type: ignore[attr-defined]


def _style_cell(cell: object, style: str) -> None:
    if style == "header":
        cell.font = Font(bold=True)  # type: ignore[attr-defined]
        cell.fill = PatternFill("solid", fgColor=_HEADER_FILL)  # type: ignore[attr-defined]
        cell.border = Border(bottom=Side(style="thin"))  # type: ignore[attr-defined]
        cell.alignment = Alignment(wrap_text=True, vertical="top")  # type: ignore[attr-defined]
    elif style == "group":
        cell.font = Font(bold=True)  # type: ignore[attr-defined]
        cell.fill = PatternFill("solid", fgColor=_GROUP_FILL)  # type: ignore[attr-defined]
    elif style == "total":
        cell.font = Font(bold=True)  # type: ignore[attr-defined]
        cell.border = Border(top=Side(style="thin"))  # type: ignore[attr-defined]
    elif style == "title":
        cell.font = Font(bold=True, size=13)  # type: ignore[attr-defined]
    elif style == "note":
        cell.font = Font(italic=True, color="555555")  # type: ignore[attr-defined]


def _display_width(value: Value) -> int:
    """Roughly how many characters a value takes once formatted."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return 5
    if isinstance(value, int):
        return len(f"{value:,}")
    if isinstance(value, float):
        return len(f"{value:,.1f}")
    return len(value)


# Rows whose text may spill over empty cells to its right: their text must not widen a column.
_SPILL_STYLES = ("title", "note", "params")


def _set_widths(sheet: Worksheet, grid: Grid) -> None:
    widths: dict[int, int] = {}
    for row in range(1, grid.n_rows + 1):
        style = grid.style(row)
        for col in range(1, len(grid.row_cells(row)) + 1):
            value = grid.value(row, col)
            if style in _SPILL_STYLES and isinstance(value, str):
                continue
            width = _display_width(value)
            if style == "header":
                width = min(width, 18)  # headers wrap instead of widening numeric columns
            widths[col] = max(widths.get(col, 0), width)
    for col, width in widths.items():
        sheet.column_dimensions[column_letter(col)].width = max(_MIN_WIDTH, min(_MAX_WIDTH, width + 2))


def _decorate_table(sheet: Worksheet, grid: Grid, *, freeze: str, autofilter: bool = True) -> None:
    sheet.freeze_panes = freeze
    last_data = grid.n_rows - 1 if grid.n_rows > 1 and grid.style(grid.n_rows) == "total" else grid.n_rows
    if autofilter and last_data > 1:
        sheet.auto_filter.ref = f"A1:{column_letter(grid.n_cols)}{last_data}"


def _decorate_operations(sheet: Worksheet, grid: Grid) -> None:
    """Freeze names and header; make each layer's operations a collapsible group."""
    _decorate_table(sheet, grid, freeze="D2")
    sheet.sheet_properties.outlinePr.summaryBelow = False  # the group row sits above its operations
    row = 2
    while row <= grid.n_rows:
        if grid.style(row) != "data":
            row += 1
            continue
        start = row
        while row <= grid.n_rows and grid.style(row) == "data":
            row += 1
        sheet.row_dimensions.group(start, row - 1, outline_level=1, hidden=False)


def _decorate_planner(sheet: Worksheet, layout: PlannerLayout) -> None:
    """Freeze the per-IPU figures above the table, highlight overruns, validate the IPU column."""
    sheet.freeze_panes = f"C{layout.first_layer_row}"
    budget = layout.budget.a1
    over = PatternFill("solid", fgColor=_OVER_FILL)
    sheet.conditional_formatting.add(
        layout.worst_sums.render(), CellIsRule(operator="greaterThan", formula=[budget], fill=over)
    )
    sheet.conditional_formatting.add(
        layout.headroom.render(), CellIsRule(operator="lessThan", formula=["0"], fill=over)
    )
    first_fit = layout.fits.first.a1
    sheet.conditional_formatting.add(layout.fits.render(), FormulaRule(formula=[f"{first_fit}=FALSE"], fill=over))
    sheet.conditional_formatting.add(
        layout.unplaced.a1,
        CellIsRule(operator="greaterThan", formula=["0"], fill=PatternFill("solid", fgColor=_WARN_FILL)),
    )
    if not layout.has_layers:
        return
    sheet.conditional_formatting.add(
        _plain_range(layout.layer_column(WORST_COL)), CellIsRule(operator="greaterThan", formula=[budget], fill=over)
    )
    sheet.auto_filter.ref = f"A{layout.header_row}:K{layout.last_layer_row}"
    _validate_ipu_column(sheet, layout)


def _validate_ipu_column(sheet: Worksheet, layout: PlannerLayout) -> None:
    column = _plain_range(layout.layer_column(IPU_COL))
    rule = DataValidation(
        type="whole",
        operator="between",
        formula1="0",
        formula2=str(layout.num_ipus - 1),
        allow_blank=True,
        showErrorMessage=True,
        errorTitle="IPU number",
        error=f"Give an IPU number from 0 to {layout.num_ipus - 1} (the IPUs in row 4).",
    )
    rule.add(column)
    sheet.add_data_validation(rule)
    fill = PatternFill("solid", fgColor=_INPUT_FILL)
    for row in range(layout.first_layer_row, layout.last_layer_row + 1):
        sheet.cell(row=row, column=IPU_COL).fill = fill


def _plain_range(cells: RangeRef) -> str:
    """``B12:B40`` without ``$`` marks, as openpyxl wants ranges for rules."""
    return f"{cells.first.local().a1}:{cells.last.local().a1}"
