"""A small spreadsheet-formula layer shared by the CSV, TSV and XLSX writers.

Every derived figure is built once as a formula object that both renders as
spreadsheet text (TSV, XLSX) and evaluates in Python to the value written into
CSV, so the outputs agree cell for cell. The formula kinds, the spreadsheet rules
their evaluation follows, and :class:`Grid` and :class:`Book`: docs/spreadsheets.md
('The formula layer').
"""

from __future__ import annotations

import dataclasses
import operator
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from typing import ClassVar, Protocol, TypeAlias

from popliner.writers.cells import CellRef, RangeRef, column_letter

__all__ = [
    "BYTES_PER_MB",
    "And",
    "Arith",
    "Cell",
    "CellRef",
    "Compare",
    "Const",
    "CountIf",
    "Expr",
    "FormulaError",
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
    "column_letter",
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
# Formula kinds


class Resolver(Protocol):
    """Where formulas read cells from: one cell, or a whole range at once (row by row)."""

    def cell(self, ref: CellRef) -> Value: ...

    def range(self, cells: RangeRef) -> list[Value]: ...


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


@dataclass(frozen=True)
class SumIf:
    """``SUMIF(range, criterion, sum_range)``: sum where ``range`` equals the criterion."""

    range: RangeRef
    criterion: Expr
    sum_range: RangeRef

    def __post_init__(self) -> None:
        if self.range.shape != self.sum_range.shape:
            raise FormulaError(f"ranges {self.range.render()} and {self.sum_range.render()} differ in shape")

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


def _divide(left: float, right: float) -> float:
    if right == 0:
        raise FormulaError("#DIV/0!")
    return left / right


def _operand(expr: Expr, here: str | None) -> str:
    # Parenthesise nested operators so the text never depends on precedence rules.
    text = expr.render(here)
    return f"({text})" if isinstance(expr, (Arith, Compare)) else text


@dataclass(frozen=True)
class _Infix:
    """``left op right`` on two numbers (blanks as 0), ``op`` one of the kind's :attr:`OPS`."""

    OPS: ClassVar[dict[str, Callable[[float, float], Value]]]

    left: Expr
    op: str
    right: Expr

    def __post_init__(self) -> None:
        if self.op not in self.OPS:
            raise ValueError(f"unknown {type(self).__name__} operator {self.op!r}")

    def render(self, here: str | None = None) -> str:
        return _operand(self.left, here) + self.op + _operand(self.right, here)

    def evaluate(self, resolve: Resolver) -> Value:
        return self.OPS[self.op](_as_number(self.left.evaluate(resolve)), _as_number(self.right.evaluate(resolve)))


@dataclass(frozen=True)
class Arith(_Infix):
    """``left op right`` for op in ``+ - * /`` (``/`` turns bytes into MB)."""

    OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": _divide}


@dataclass(frozen=True)
class Compare(_Infix):
    """``left op right`` giving TRUE/FALSE, e.g. a stage figure against the budget cell."""

    OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "=": operator.eq,
           "<>": operator.ne}


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


def mb(cell: CellRef) -> Expr:
    """Bytes in ``cell`` as MB with one decimal: ``ROUND(H2/1000000,1)``."""
    return Round(Arith(Ref(cell), "/", Const(BYTES_PER_MB)), 1)
