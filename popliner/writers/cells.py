"""Where a formula points: A1 cell and range references, and column letters.

Shared by the formula layer (:mod:`popliner.writers.formula`) and the sheets (:mod:`popliner.writers.grid`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CellRef", "RangeRef", "column_letter"]


def column_letter(col: int) -> str:
    """1 -> "A", 26 -> "Z", 27 -> "AA" (bijective base 26)."""
    if col < 1:
        raise ValueError(f"column numbers start at 1, got {col}")
    letters = ""
    while col:
        col, rest = divmod(col - 1, 26)
        letters = chr(ord("A") + rest) + letters
    return letters


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

    @property
    def shape(self) -> tuple[int, int]:
        return (self.last.row - self.first.row + 1, self.last.col - self.first.col + 1)

    def render(self, here: str | None = None) -> str:
        return _sheet_prefix(self.first.sheet, here) + f"{self.first.a1}:{self.last.a1}"
