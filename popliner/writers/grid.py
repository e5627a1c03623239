"""A sheet of cells (:class:`Grid`) and a book of sheets: values and formulas placed A1-style, evaluated.

Every review table is a grid: the CSV/TSV writers write its values or formulas row by row, the XLSX
writer places it on a sheet. A formula (:mod:`popliner.writers.formula`) that names another sheet is
evaluated through the :data:`Book`.
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from popliner.writers.cells import CellRef, RangeRef
from popliner.writers.formula import (
    And,
    Arith,
    Cell,
    Compare,
    Const,
    CountIf,
    FormulaError,
    If,
    Index,
    Match,
    Ref,
    Round,
    Sum,
    SumIf,
    Value,
    shifted,
)

__all__ = ["Book", "Grid", "evaluate_book"]


_FORMULA_KINDS = frozenset({Const, Ref, Sum, Round, SumIf, CountIf, Arith, Compare, If, And, Match, Index})


def _is_formula(cell: object) -> bool:
    # An exact type check: this runs once per cell read, and the kinds are final.
    return type(cell) in _FORMULA_KINDS


def _native(cell: Cell) -> Cell:
    """numpy scalars (profile arrays) become Python numbers, which the evaluator and every writer know."""
    if cell is None or isinstance(cell, (bool, int, float, str)) or _is_formula(cell):
        return cell
    if isinstance(cell, numbers.Integral):
        return int(cell)
    if isinstance(cell, numbers.Real):
        return float(cell)
    return cell


@dataclass
class _Row:
    cells: list[Cell]
    style: str


@dataclass
class Grid:
    """One sheet: rows of plain values and formulas, addressed A1-style.

    ``style`` tags rows for the XLSX writer ("header", "group", "total",
    "title", "note", "params", "data"); ``column_formats`` and per-cell formats give
    number formats (``#,##0`` ...). Text writers ignore both.
    """

    name: str
    column_formats: dict[int, str] = field(default_factory=dict)
    _rows: list[_Row] = field(default_factory=list)
    _formats: dict[tuple[int, int], str] = field(default_factory=dict)
    _cache: dict[tuple[str, int, int], Value] = field(default_factory=dict, repr=False)

    # -- building ---------------------------------------------------------

    def append(self, cells: Sequence[Cell], *, style: str = "data") -> int:
        """Add a row below the last one; returns its 1-based row number."""
        self._rows.append(_Row([_native(cell) for cell in cells], style))
        self._cache.clear()
        return len(self._rows)

    def put(self, row: int, col: int, value: Cell, *, fmt: str | None = None) -> None:
        """Set one cell, adding blank rows/cells up to it as needed."""
        while len(self._rows) < row:
            self._rows.append(_Row([], "data"))
        cells = self._rows[row - 1].cells
        cells.extend([None] * (col - len(cells)))
        cells[col - 1] = _native(value)
        if fmt is not None:
            self._formats[(row, col)] = fmt
        self._cache.clear()

    def set_style(self, row: int, style: str) -> None:
        self._rows[row - 1].style = style

    # -- reading ----------------------------------------------------------

    @property
    def n_rows(self) -> int:
        return len(self._rows)

    @property
    def n_cols(self) -> int:
        return max((len(r.cells) for r in self._rows), default=0)

    def cell(self, row: int, col: int) -> Cell:
        if not (1 <= row <= len(self._rows)) or col < 1:
            return None
        cells = self._rows[row - 1].cells
        return cells[col - 1] if col <= len(cells) else None

    def style(self, row: int) -> str:
        return self._rows[row - 1].style

    def number_format(self, row: int, col: int) -> str | None:
        return self._formats.get((row, col), self.column_formats.get(col))

    def row_cells(self, row: int) -> list[Cell]:
        return list(self._rows[row - 1].cells)

    def formula_text(self, row: int, col: int, row_offset: int = 0) -> str | None:
        """The cell's formula as a spreadsheet takes it (``=SUM(D2:D9)``), or None for a plain value.

        ``row_offset`` renders it for the grid placed that many rows further down.
        """
        cell = self.cell(row, col)
        if _is_formula(cell):
            return "=" + shifted(cell, row_offset).render(self.name)  # type: ignore[arg-type]
        return None

    # -- evaluation -------------------------------------------------------

    def value(self, row: int, col: int, book: Book | None = None) -> Value:
        """The evaluated value of a cell; formulas follow references.

        Without ``book`` only this grid can be involved, so results are kept
        until the grid changes. With ``book`` other grids may change behind
        this one's back, so results are kept for this call only.
        """
        cell = self.cell(row, col)
        if not _is_formula(cell):
            return cell  # type: ignore[return-value]
        memo = self._cache if book is None else {}
        return self._evaluate(row, col, _Context(book, memo, set()))

    def _evaluate(self, row: int, col: int, context: _Context) -> Value:
        cell = self.cell(row, col)
        if not _is_formula(cell):
            return cell  # type: ignore[return-value]
        key = (self.name, row, col)
        if key in context.memo:
            return context.memo[key]
        if key in context.busy:
            raise FormulaError(f"circular reference at {self.name}!{CellRef(row, col).a1}")
        context.busy.add(key)
        try:
            value = cell.evaluate(_GridResolver(self, context))  # type: ignore[union-attr]
        finally:
            context.busy.discard(key)
        context.memo[key] = value
        return value

    def _sheet(self, sheet: str | None, context: _Context) -> Grid:
        """The grid a reference on this grid points into."""
        if sheet is None or sheet == self.name:
            return self
        if context.book is None or sheet not in context.book:
            raise FormulaError(f"#REF!: no sheet {sheet!r}")
        return context.book[sheet]

    def _range_values(self, cells: RangeRef, context: _Context) -> list[Value]:
        # Walks the stored rows directly: big column sums are the hot path and
        # building a CellRef per cell would dominate their cost.
        values: list[Value] = []
        for row in range(cells.first.row, cells.last.row + 1):
            stored = self._rows[row - 1].cells if row <= len(self._rows) else []
            for col in range(cells.first.col, cells.last.col + 1):
                cell = stored[col - 1] if col <= len(stored) else None
                values.append(self._evaluate(row, col, context) if _is_formula(cell) else cell)  # type: ignore[arg-type]
        return values


@dataclass(frozen=True)
class _GridResolver:
    """Reads cells for formulas on ``grid``, following other sheets through the book."""

    grid: Grid
    context: _Context

    def cell(self, ref: CellRef) -> Value:
        return self.grid._sheet(ref.sheet, self.context)._evaluate(ref.row, ref.col, self.context)

    def range(self, cells: RangeRef) -> list[Value]:
        return self.grid._sheet(cells.first.sheet, self.context)._range_values(cells, self.context)


@dataclass
class _Context:
    """One evaluation: the other sheets, results so far, and the cells being worked on."""

    book: Book | None
    memo: dict[tuple[str, int, int], Value]
    busy: set[tuple[str, int, int]]


#: Grids by sheet name, for formulas that refer to other sheets.
Book = Mapping[str, Grid]


def evaluate_book(grids: Sequence[Grid]) -> dict[str, list[list[Value | FormulaError]]]:
    """Every cell of every grid evaluated, sharing results across sheets.

    A cell whose formula cannot be evaluated holds its :class:`FormulaError`
    (what a spreadsheet would show as ``#N/A``, ``#VALUE!`` ...).
    """
    book = {grid.name: grid for grid in grids}
    context = _Context(book, {}, set())
    out: dict[str, list[list[Value | FormulaError]]] = {}
    for grid in grids:
        rows: list[list[Value | FormulaError]] = []
        for r in range(1, grid.n_rows + 1):
            row: list[Value | FormulaError] = []
            for c in range(1, len(grid.row_cells(r)) + 1):
                try:
                    row.append(grid._evaluate(r, c, context))
                except FormulaError as error:
                    context.busy.clear()
                    row.append(error)
            rows.append(row)
        out[grid.name] = rows
    return out
