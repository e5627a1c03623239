"""A small spreadsheet-formula layer shared by the CSV, TSV and XLSX writers.

Every derived figure in a review table (a row total, a column sum, a byte
count shown in MB, a per-IPU sum in the split planner) is built once as a
formula object. The same object

* renders as spreadsheet text (``=SUM(D2:D9)``) for TSV and XLSX, so an
  engineer sees how the figure is obtained and edits propagate, and
* evaluates in Python to the value popliner writes into CSV.

Because both come from one object the two outputs agree cell for cell; the
tests check that against an independent engine (the ``formulas`` package).

Evaluation follows the spreadsheet rules that matter here: blank cells count
as 0 in arithmetic, SUM ignores text, blanks and booleans in ranges, ROUND
takes halves away from zero, and SUMIF/COUNTIF match by equality only (no
``">5"``-style criteria; popliner never needs them).

A :class:`Grid` is one sheet: it places rows, knows each cell's A1 address
and evaluates its formula cells, following references into other grids of a
:class:`Book` when a reference names another sheet.
"""

from __future__ import annotations

import dataclasses
import numbers
import operator
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import ROUND_HALF_UP, Decimal
from typing import Protocol, TypeAlias

__all__ = [
    "BYTES_PER_MB",
    "And",
    "Arith",
    "Book",
    "Cell",
    "CellRef",
    "Compare",
    "Const",
    "CountIf",
    "Expr",
    "FormulaError",
    "FunctionResolver",
    "Grid",
    "If",
    "Index",
    "Match",
    "RangeRef",
    "Ref",
    "Resolver",
    "Round",
    "Sum",
    "SumIf",
    "Value",
    "column_index",
    "column_letter",
    "evaluate_book",
    "mb",
    "shifted",
    "sum_range",
]

#: popliner reports MB as 10**6 bytes (not MiB), matching the MB columns' titles.
BYTES_PER_MB = 1_000_000

#: What a cell holds once evaluated.
Value: TypeAlias = int | float | str | bool | None
#: What a grid cell holds before evaluation: a plain value or a formula.
Cell: TypeAlias = "int | float | str | bool | None | Expr"


class FormulaError(ValueError):
    """A formula that cannot be evaluated (a spreadsheet would show #VALUE! etc.)."""


# ---------------------------------------------------------------------------
# Addressing


def column_letter(col: int) -> str:
    """1 -> "A", 26 -> "Z", 27 -> "AA" (bijective base 26)."""
    if col < 1:
        raise ValueError(f"column numbers start at 1, got {col}")
    letters = ""
    while col:
        col, rest = divmod(col - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


def column_index(letters: str) -> int:
    """ "A" -> 1, "AA" -> 27; the inverse of :func:`column_letter`."""
    if not letters or not letters.isalpha():
        raise ValueError(f"not a column name: {letters!r}")
    index = 0
    for char in letters.upper():
        index = index * 26 + (ord(char) - ord("A") + 1)
    return index


# Sheet names made only of these characters need no quotes in a reference.
_PLAIN_SHEET = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")


def _sheet_prefix(sheet: str | None, here: str | None) -> str:
    if sheet is None or sheet == here:
        return ""
    if _PLAIN_SHEET.fullmatch(sheet):
        return f"{sheet}!"
    return "'" + sheet.replace("'", "''") + "'!"


@dataclass(frozen=True)
class CellRef:
    """One cell, 1-based. ``sheet`` None means the sheet the formula is on."""

    row: int
    col: int
    sheet: str | None = None
    abs_row: bool = False
    abs_col: bool = False

    def __post_init__(self) -> None:
        if self.row < 1 or self.col < 1:
            raise ValueError(f"cell positions start at 1, got row {self.row} col {self.col}")

    @property
    def a1(self) -> str:
        col = ("$" if self.abs_col else "") + column_letter(self.col)
        row = ("$" if self.abs_row else "") + str(self.row)
        return col + row

    def absolute(self) -> CellRef:
        return CellRef(self.row, self.col, self.sheet, True, True)

    def render(self, here: str | None = None) -> str:
        return _sheet_prefix(self.sheet, here) + self.a1

    def local(self) -> CellRef:
        """The same position without ``$`` marks, for lookups."""
        return CellRef(self.row, self.col, self.sheet)


@dataclass(frozen=True)
class RangeRef:
    """A rectangle of cells, ``first`` top-left and ``last`` bottom-right."""

    first: CellRef
    last: CellRef

    def __post_init__(self) -> None:
        if self.first.sheet != self.last.sheet:
            raise ValueError("a range lies on one sheet")
        if self.last.row < self.first.row or self.last.col < self.first.col:
            raise ValueError(f"empty range {self.first.a1}:{self.last.a1}")

    def cells(self) -> Iterator[CellRef]:
        """Row by row, as spreadsheets pair up SUMIF's two ranges."""
        for row in range(self.first.row, self.last.row + 1):
            for col in range(self.first.col, self.last.col + 1):
                yield CellRef(row, col, self.first.sheet)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.last.row - self.first.row + 1, self.last.col - self.first.col + 1)

    def absolute(self) -> RangeRef:
        return RangeRef(self.first.absolute(), self.last.absolute())

    def render(self, here: str | None = None) -> str:
        return _sheet_prefix(self.first.sheet, here) + f"{self.first.a1}:{self.last.a1}"


# ---------------------------------------------------------------------------
# Formula kinds


class Resolver(Protocol):
    """Where formulas read cells from: one cell, or a whole range at once (row by row)."""

    def cell(self, ref: CellRef) -> Value: ...

    def range(self, cells: RangeRef) -> list[Value]: ...


@dataclass(frozen=True)
class FunctionResolver:
    """A :class:`Resolver` over a function of one reference (for simple callers and tests)."""

    lookup: Callable[[CellRef], Value]

    def cell(self, ref: CellRef) -> Value:
        return self.lookup(ref)

    def range(self, cells: RangeRef) -> list[Value]:
        return [self.lookup(ref) for ref in cells.cells()]


class Expr(Protocol):
    """A formula (or part of one): renders as text and evaluates to a value."""

    def render(self, here: str | None = None) -> str:
        """Spreadsheet text without the leading ``=``; ``here`` is the formula's sheet."""
        ...

    def evaluate(self, resolve: Resolver) -> Value: ...


def _is_number(value: Value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_number(value: Value) -> float:
    """A value used in arithmetic: blank is 0, booleans are 0/1, text is an error."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, (int, float)):
        return value
    raise FormulaError(f"#VALUE!: text {value!r} used as a number")


def _render_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return repr(value)


@dataclass(frozen=True)
class Const:
    """A literal number, text or boolean inside a formula."""

    value: float | str | bool

    def render(self, here: str | None = None) -> str:
        if isinstance(self.value, bool):
            return "TRUE" if self.value else "FALSE"
        if isinstance(self.value, str):
            return '"' + self.value.replace('"', '""') + '"'
        return _render_number(self.value)

    def evaluate(self, resolve: Resolver) -> Value:
        return self.value


@dataclass(frozen=True)
class Ref:
    """The value of one cell (``=B3``); a blank cell reads as 0, as in spreadsheets."""

    cell: CellRef

    def render(self, here: str | None = None) -> str:
        return self.cell.render(here)

    def evaluate(self, resolve: Resolver) -> Value:
        value = resolve.cell(self.cell)
        return 0 if value is None else value


@dataclass(frozen=True)
class Sum:
    """``SUM(...)`` over ranges and cells; text, blanks and booleans are skipped."""

    args: tuple[RangeRef | CellRef, ...]

    def render(self, here: str | None = None) -> str:
        return "SUM(" + ",".join(arg.render(here) for arg in self.args) + ")"

    def evaluate(self, resolve: Resolver) -> Value:
        total: float = 0
        for arg in self.args:
            values = resolve.range(arg) if isinstance(arg, RangeRef) else [resolve.cell(arg)]
            total += sum(value for value in values if _is_number(value))  # type: ignore[misc]
        return total


@dataclass(frozen=True)
class Round:
    """``ROUND(x, digits)``: halves go away from zero (Python's round() would go to even)."""

    arg: Expr
    digits: int

    def render(self, here: str | None = None) -> str:
        return f"ROUND({self.arg.render(here)},{self.digits})"

    def evaluate(self, resolve: Resolver) -> Value:
        number = _as_number(self.arg.evaluate(resolve))
        # str() gives the shortest decimal that reads back as this float, which
        # is what a spreadsheet shows and rounds, not the binary expansion.
        rounded = Decimal(str(number)).quantize(Decimal(1).scaleb(-self.digits), rounding=ROUND_HALF_UP)
        return float(rounded) if self.digits > 0 else int(rounded)


def _criterion_matches(value: Value, criterion: Value) -> bool:
    """SUMIF/COUNTIF equality: numbers by value, text case-insensitively, blanks never."""
    if value is None or criterion is None:
        return False
    if isinstance(value, bool) or isinstance(criterion, bool):
        return value is criterion
    if _is_number(value) and _is_number(criterion):
        return value == criterion
    if isinstance(value, str) and isinstance(criterion, str):
        return value.casefold() == criterion.casefold()
    return False


def _check_same_shape(first: RangeRef, second: RangeRef) -> None:
    if first.shape != second.shape:
        raise FormulaError(f"ranges {first.render()} and {second.render()} differ in shape")


@dataclass(frozen=True)
class SumIf:
    """``SUMIF(range, criterion, sum_range)``: sum where ``range`` equals the criterion."""

    range: RangeRef
    criterion: Expr
    sum_range: RangeRef

    def __post_init__(self) -> None:
        _check_same_shape(self.range, self.sum_range)

    def render(self, here: str | None = None) -> str:
        parts = (self.range.render(here), self.criterion.render(here), self.sum_range.render(here))
        return "SUMIF(" + ",".join(parts) + ")"

    def evaluate(self, resolve: Resolver) -> Value:
        wanted = self.criterion.evaluate(resolve)
        total: float = 0
        for key, value in zip(resolve.range(self.range), resolve.range(self.sum_range)):
            if _criterion_matches(key, wanted) and _is_number(value):
                total += value  # type: ignore[operator]
        return total


@dataclass(frozen=True)
class CountIf:
    """``COUNTIF(range, criterion)``: how many cells equal the criterion."""

    range: RangeRef
    criterion: Expr

    def render(self, here: str | None = None) -> str:
        return f"COUNTIF({self.range.render(here)},{self.criterion.render(here)})"

    def evaluate(self, resolve: Resolver) -> Value:
        wanted = self.criterion.evaluate(resolve)
        return sum(1 for value in resolve.range(self.range) if _criterion_matches(value, wanted))


_ARITH: dict[str, Callable[[float, float], float]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
}


def _operand(expr: Expr, here: str | None) -> str:
    # Parenthesise nested operators so the text never depends on precedence rules.
    text = expr.render(here)
    return f"({text})" if isinstance(expr, (Arith, Compare)) else text


@dataclass(frozen=True)
class Arith:
    """``left op right`` for op in ``+ - * /`` (``/`` turns bytes into MB)."""

    left: Expr
    op: str
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in _ARITH:
            raise ValueError(f"unknown operator {self.op!r}")

    def render(self, here: str | None = None) -> str:
        return _operand(self.left, here) + self.op + _operand(self.right, here)

    def evaluate(self, resolve: Resolver) -> Value:
        left = _as_number(self.left.evaluate(resolve))
        right = _as_number(self.right.evaluate(resolve))
        if self.op == "/" and right == 0:
            raise FormulaError("#DIV/0!")
        return _ARITH[self.op](left, right)


_COMPARE: dict[str, Callable[[float, float], bool]] = {
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "=": operator.eq,
    "<>": operator.ne,
}


@dataclass(frozen=True)
class Compare:
    """``left op right`` giving TRUE/FALSE, e.g. a stage figure against the budget cell."""

    left: Expr
    op: str
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in _COMPARE:
            raise ValueError(f"unknown comparison {self.op!r}")

    def render(self, here: str | None = None) -> str:
        return _operand(self.left, here) + self.op + _operand(self.right, here)

    def evaluate(self, resolve: Resolver) -> Value:
        left = _as_number(self.left.evaluate(resolve))
        right = _as_number(self.right.evaluate(resolve))
        return bool(_COMPARE[self.op](left, right))


@dataclass(frozen=True)
class If:
    """``IF(condition, then, else)``; only the chosen branch is evaluated, as in spreadsheets."""

    condition: Expr
    then: Expr
    otherwise: Expr

    def render(self, here: str | None = None) -> str:
        parts = (self.condition.render(here), self.then.render(here), self.otherwise.render(here))
        return "IF(" + ",".join(parts) + ")"

    def evaluate(self, resolve: Resolver) -> Value:
        condition = self.condition.evaluate(resolve)
        if isinstance(condition, str):
            raise FormulaError(f"#VALUE!: text {condition!r} used as a condition")
        chosen = self.then if _as_number(condition) else self.otherwise
        return chosen.evaluate(resolve)


@dataclass(frozen=True)
class And:
    """``AND(...)`` over conditions and ranges; blanks and text in ranges are skipped."""

    args: tuple[Expr | RangeRef, ...]

    def render(self, here: str | None = None) -> str:
        return "AND(" + ",".join(arg.render(here) for arg in self.args) + ")"

    def evaluate(self, resolve: Resolver) -> Value:
        seen = False
        result = True
        for arg in self.args:
            values: list[Value]
            if isinstance(arg, RangeRef):
                values = [v for v in resolve.range(arg) if isinstance(v, (bool, int, float))]
            else:
                values = [arg.evaluate(resolve)]
            for value in values:
                seen = True
                result = result and bool(_as_number(value))
        if not seen:
            raise FormulaError("#VALUE!: AND of nothing")
        return result


@dataclass(frozen=True)
class Match:
    """``MATCH(value, range, 0)``: 1-based position of the first equal cell (exact match only)."""

    lookup: Expr
    range: RangeRef

    def __post_init__(self) -> None:
        if 1 not in self.range.shape:
            raise ValueError("MATCH looks along one row or one column")

    def render(self, here: str | None = None) -> str:
        return f"MATCH({self.lookup.render(here)},{self.range.render(here)},0)"

    def evaluate(self, resolve: Resolver) -> Value:
        wanted = self.lookup.evaluate(resolve)
        for position, value in enumerate(resolve.range(self.range), start=1):
            if _criterion_matches(value, wanted):
                return position
        raise FormulaError(f"#N/A: {wanted!r} not found in {self.range.render()}")


@dataclass(frozen=True)
class Index:
    """``INDEX(range, row, column)``: the cell at a 1-based position inside ``range``."""

    range: RangeRef
    row: Expr
    col: Expr

    def render(self, here: str | None = None) -> str:
        return f"INDEX({self.range.render(here)},{self.row.render(here)},{self.col.render(here)})"

    def evaluate(self, resolve: Resolver) -> Value:
        rows, cols = self.range.shape
        row = _as_number(self.row.evaluate(resolve))
        col = _as_number(self.col.evaluate(resolve))
        if not (float(row).is_integer() and float(col).is_integer() and 1 <= row <= rows and 1 <= col <= cols):
            raise FormulaError(f"#REF!: INDEX({row}, {col}) outside a {rows}x{cols} range")
        first = self.range.first
        value = resolve.cell(CellRef(first.row + int(row) - 1, first.col + int(col) - 1, first.sheet))
        return 0 if value is None else value


def shifted(expr: Expr, rows: int) -> Expr:
    """The same formula with every reference into its own sheet moved down ``rows`` rows.

    Used when a table is written below other tables in one text stream, so
    that its formulas still point at its own cells.
    """
    if rows == 0:
        return expr
    moved: Expr = _shift(expr, rows)  # type: ignore[assignment]
    return moved


def _shift(item: object, rows: int) -> object:
    if isinstance(item, CellRef):
        return dataclasses.replace(item, row=item.row + rows) if item.sheet is None else item
    if isinstance(item, RangeRef):
        return RangeRef(_shift(item.first, rows), _shift(item.last, rows))  # type: ignore[arg-type]
    if isinstance(item, tuple):
        return tuple(_shift(part, rows) for part in item)
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        changes = {f.name: _shift(getattr(item, f.name), rows) for f in dataclasses.fields(item)}
        return dataclasses.replace(item, **changes)
    return item


# ---------------------------------------------------------------------------
# Helpers used by the table builders


def sum_range(col: int, first_row: int, last_row: int) -> Cell:
    """SUM of one column's rows; an empty span is a plain 0 (no inverted range)."""
    if last_row < first_row:
        return 0
    return Sum((RangeRef(CellRef(first_row, col), CellRef(last_row, col)),))


def mb(cell: CellRef, digits: int = 1) -> Expr:
    """Bytes in ``cell`` as MB with ``digits`` decimals: ``ROUND(H2/1000000,1)``."""
    return Round(Arith(Ref(cell), "/", Const(BYTES_PER_MB)), digits)


# ---------------------------------------------------------------------------
# Sheets


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

    def ref(self, row: int, col: int) -> CellRef:
        """A reference to a cell of this grid, as formulas on this grid use it."""
        return CellRef(row, col)

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

    def is_formula(self, row: int, col: int) -> bool:
        return _is_formula(self.cell(row, col))

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

    def values(self, book: Book | None = None) -> list[list[Value]]:
        """Every cell evaluated, row by row (rows keep their own lengths)."""
        context = _Context(book, self._cache if book is None else {}, set())
        return [
            [self._evaluate(r, c, context) for c in range(1, len(self._rows[r - 1].cells) + 1)]
            for r in range(1, self.n_rows + 1)
        ]

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
