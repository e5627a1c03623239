"""The formula layer: each kind renders the text a spreadsheet takes and evaluates to its value."""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popliner.writers.formula import (
    BYTES_PER_MB,
    Arith,
    CellRef,
    Compare,
    Const,
    CountIf,
    Expr,
    FormulaError,
    RangeRef,
    Ref,
    Round,
    Sum,
    SumIf,
    Value,
    column_letter,
    mb,
    sum_range,
)
from popliner.writers.grid import Grid, evaluate_book

# ---------------------------------------------------------------------------
# Addressing


def column_index(letters: str) -> int:
    """ "A" -> 1, "AA" -> 27: the inverse of column_letter, as the oracle of its round trip."""
    index = 0
    for char in letters.upper():
        index = index * 26 + (ord(char) - ord("A") + 1)
    return index


def absolute(ref: CellRef) -> CellRef:
    return dataclasses.replace(ref, abs_row=True, abs_col=True)


@pytest.mark.parametrize(("col", "letters"), [(1, "A"), (26, "Z"), (27, "AA"), (52, "AZ"), (702, "ZZ"), (703, "AAA")])
def test_column_letters(col: int, letters: str) -> None:
    assert column_letter(col) == letters
    assert column_index(letters) == col


@given(st.integers(min_value=1, max_value=16384))
def test_column_letters_round_trip(col: int) -> None:
    assert column_index(column_letter(col)) == col


def test_bad_positions_are_refused() -> None:
    with pytest.raises(ValueError):
        column_letter(0)
    with pytest.raises(ValueError):
        CellRef(0, 1)
    with pytest.raises(ValueError):
        RangeRef(CellRef(3, 1), CellRef(2, 1))


def test_cell_and_range_rendering() -> None:
    assert CellRef(2, 4).render() == "D2"
    assert absolute(CellRef(3, 2)).render() == "$B$3"
    assert CellRef(4, 3, abs_row=True).render() == "C$4"
    assert CellRef(1, 1, sheet="Layers").render() == "Layers!A1"
    assert CellRef(1, 1, sheet="Layers").render(here="Layers") == "A1"  # same sheet: no prefix
    assert CellRef(1, 1, sheet="Split planner").render() == "'Split planner'!A1"
    assert CellRef(1, 1, sheet="Bob's").render() == "'Bob''s'!A1"
    assert RangeRef(CellRef(2, 4), CellRef(9, 4)).render() == "D2:D9"


# ---------------------------------------------------------------------------
# One test per formula kind: text and value


@dataclass(frozen=True)
class FunctionResolver:
    """A :class:`Resolver` over a function of one reference."""

    lookup: Callable[[CellRef], Value]

    def cell(self, ref: CellRef) -> Value:
        return self.lookup(ref)

    def range(self, cells: RangeRef) -> list[Value]:
        # Row by row, as spreadsheets pair up SUMIF's two ranges.
        return [self.lookup(CellRef(row, col, cells.first.sheet)) for row in range(cells.first.row, cells.last.row + 1)
                for col in range(cells.first.col, cells.last.col + 1)]


def _values(cells: dict[str, Any]) -> FunctionResolver:
    """A resolver over a dict of A1 address -> value (blank when absent)."""
    return FunctionResolver(lambda ref: cells.get(ref.local().a1))


def test_const() -> None:
    assert Const(5).render() == "5"
    assert Const(2.5).render() == "2.5"
    assert Const(1000000.0).render() == "1000000"
    assert Const(True).render() == "TRUE"
    assert Const('say "hi"').render() == '"say ""hi"""'
    assert Const(7).evaluate(_values({})) == 7


def test_ref() -> None:
    ref = Ref(CellRef(2, 2))
    assert ref.render() == "B2"
    assert ref.evaluate(_values({"B2": 42})) == 42
    assert ref.evaluate(_values({})) == 0  # a blank cell reads as 0


def test_sum_skips_text_blanks_and_booleans() -> None:
    formula = Sum((RangeRef(CellRef(1, 1), CellRef(4, 1)), CellRef(1, 2)))
    assert formula.render() == "SUM(A1:A4,B1)"
    cells = {"A1": 1, "A2": "text", "A3": True, "B1": 10}  # A4 blank
    assert formula.evaluate(_values(cells)) == 11


def test_sum_range_of_nothing_is_zero() -> None:
    assert sum_range(4, 2, 1) == 0
    assert sum_range(4, 2, 9) == Sum((RangeRef(CellRef(2, 4), CellRef(9, 4)),))


@pytest.mark.parametrize(
    ("number", "digits", "expected"),
    [(2.25, 1, 2.3), (2.35, 1, 2.4), (-2.25, 1, -2.3), (7.95, 1, 8.0), (2.5, 0, 3), (-2.5, 0, -3), (1234, -2, 1200)],
)
def test_round_takes_halves_away_from_zero(number: float, digits: int, expected: float) -> None:
    formula = Round(Const(number), digits)
    assert formula.evaluate(_values({})) == expected


def test_round_renders_and_mb_helper() -> None:
    formula = mb(CellRef(2, 8))
    assert formula.render() == "ROUND(H2/1000000,1)"
    assert formula.evaluate(_values({"H2": 7_950_000})) == 8.0
    assert formula.evaluate(_values({"H2": 1_234_567})) == 1.2
    assert BYTES_PER_MB == 1_000_000


def test_sumif() -> None:
    keys = RangeRef(CellRef(1, 1, abs_row=True, abs_col=True), CellRef(4, 1, abs_row=True, abs_col=True))
    sums = RangeRef(CellRef(1, 2, abs_row=True, abs_col=True), CellRef(4, 2, abs_row=True, abs_col=True))
    formula = SumIf(keys, Ref(CellRef(1, 4, abs_row=True)), sums)
    assert formula.render() == "SUMIF($A$1:$A$4,D$1,$B$1:$B$4)"
    cells = {"A1": 0, "A2": 1, "A3": 1, "B1": 5, "B2": 7, "B3": 11, "B4": 13, "D1": 1}  # A4 blank
    assert formula.evaluate(_values(cells)) == 18
    assert formula.evaluate(_values({**cells, "D1": 0})) == 5
    assert formula.evaluate(_values({**cells, "D1": 9})) == 0


def test_sumif_ranges_must_match() -> None:
    with pytest.raises(FormulaError):
        SumIf(RangeRef(CellRef(1, 1), CellRef(3, 1)), Const(1), RangeRef(CellRef(1, 2), CellRef(4, 2)))


def test_countif() -> None:
    formula = CountIf(RangeRef(CellRef(1, 1), CellRef(4, 1)), Const(1))
    assert formula.render() == "COUNTIF(A1:A4,1)"
    assert formula.evaluate(_values({"A1": 1, "A2": 1.0, "A3": 2})) == 2
    text = CountIf(RangeRef(CellRef(1, 1), CellRef(2, 1)), Const("ipu"))
    assert text.render() == 'COUNTIF(A1:A2,"ipu")'
    assert text.evaluate(_values({"A1": "IPU", "A2": "x"})) == 1  # text matches ignoring case


def test_arith() -> None:
    difference = Arith(Ref(CellRef(2, 2)), "-", Ref(CellRef(2, 3)))
    assert difference.render() == "B2-C2"
    assert difference.evaluate(_values({"B2": 10, "C2": 25})) == -15
    nested = Arith(Const(3), "-", Arith(Ref(CellRef(1, 1)), "*", Const(2)))
    assert nested.render() == "3-(A1*2)"  # nested operators are bracketed
    assert nested.evaluate(_values({"A1": 4})) == -5
    with pytest.raises(FormulaError):
        Arith(Const(1), "/", Ref(CellRef(1, 1))).evaluate(_values({}))
    with pytest.raises(FormulaError):
        Arith(Const(1), "+", Ref(CellRef(1, 1))).evaluate(_values({"A1": "text"}))
    with pytest.raises(ValueError):
        Arith(Const(1), "^", Const(2))


def test_compare() -> None:
    fits = Compare(Ref(CellRef(6, 2)), "<=", Ref(absolute(CellRef(3, 2))))
    assert fits.render() == "B6<=$B$3"
    assert fits.evaluate(_values({"B6": 10, "B3": 10})) is True
    assert fits.evaluate(_values({"B6": 11, "B3": 10})) is False
    assert Compare(Const(1), "<>", Const(2)).render() == "1<>2"
    with pytest.raises(ValueError):
        Compare(Const(1), "==", Const(1))


# ---------------------------------------------------------------------------
# Grids


def test_grid_places_rows_and_evaluates() -> None:
    grid = Grid("S")
    assert grid.append(["a", 1, 2]) == 1
    assert grid.append(["b", 3, Sum((RangeRef(CellRef(1, 2), CellRef(2, 2)),))]) == 2
    grid.put(4, 3, mb(CellRef(2, 3)))  # rows 3 and cells up to C4 appear blank
    assert grid.n_rows == 4
    assert grid.cell(3, 1) is None
    assert grid.formula_text(2, 3) == "=SUM(B1:B2)"
    assert grid.formula_text(2, 2) is None
    assert grid.value(2, 3) == 4
    assert grid.value(4, 3) == 0.0
    assert evaluate_book([grid])["S"][1] == ["b", 3, 4]


def test_grid_follows_other_sheets() -> None:
    layers = Grid("Layers")
    layers.append([5, 6])
    summary = Grid("Summary")
    summary.append([Arith(Ref(CellRef(1, 1, sheet="Layers")), "+", Ref(CellRef(1, 2, sheet="Layers")))])
    assert summary.formula_text(1, 1) == "=Layers!A1+Layers!B1"
    assert summary.value(1, 1, {"Layers": layers, "Summary": summary}) == 11
    with pytest.raises(FormulaError):
        summary.value(1, 1)  # no book to find the other sheet in


def test_grid_takes_numpy_numbers_as_python_numbers() -> None:
    import numpy as np

    grid = Grid("S")
    grid.append([np.int64(2), np.float32(0.5), Sum((RangeRef(CellRef(1, 1), CellRef(1, 2)),))])  # type: ignore[list-item]
    assert type(grid.cell(1, 1)) is int
    assert grid.value(1, 3) == 2.5  # numpy numbers are counted, not skipped as "text"


def test_grid_reports_cycles() -> None:
    grid = Grid("S")
    grid.append([Ref(CellRef(1, 2)), Ref(CellRef(1, 1))])
    with pytest.raises(FormulaError, match="circular"):
        grid.value(1, 1)


def test_grid_cache_follows_edits() -> None:
    grid = Grid("S")
    grid.append([1, Arith(Ref(CellRef(1, 1)), "*", Const(2))])
    assert grid.value(1, 2) == 2
    grid.put(1, 1, 5)
    assert grid.value(1, 2) == 10


# ---------------------------------------------------------------------------
# Against an independent engine


_KEY = re.compile(r"^'\[[^\]]+\](.+)'!([A-Z]+)(\d+)$")


def test_every_kind_agrees_with_the_formulas_engine(tmp_path: Path) -> None:
    """Render each kind into a real xlsx, let `formulas` compute it, compare with evaluate()."""
    formulas = pytest.importorskip("formulas")
    openpyxl = pytest.importorskip("openpyxl")
    grid = Grid("Kinds")
    grid.append([0, 1_250_000, "x"])
    grid.append([1, 7_950_000, "y"])
    grid.append([1, 2_650_000, None])
    keys, amounts = RangeRef(CellRef(1, 1), CellRef(3, 1)), RangeRef(CellRef(1, 2), CellRef(3, 2))
    kinds: list[Expr] = [
        Const(3),
        Ref(CellRef(2, 2)),
        Sum((amounts, CellRef(1, 1))),
        mb(CellRef(1, 2)),
        mb(CellRef(2, 2)),
        mb(CellRef(3, 2)),
        SumIf(RangeRef(absolute(keys.first), absolute(keys.last)), Const(1),
              RangeRef(absolute(amounts.first), absolute(amounts.last))),
        CountIf(keys, Const(1)),
        Arith(Ref(CellRef(2, 2)), "-", Ref(CellRef(1, 2))),
        Compare(Ref(CellRef(2, 2)), ">", Const(5_000_000)),
        Compare(Ref(CellRef(1, 2)), ">=", Const(5_000_000)),
    ]
    for kind in kinds:
        grid.append([kind])
    path = tmp_path / "kinds.xlsx"
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = grid.name
    for row in range(1, grid.n_rows + 1):
        for col in range(1, len(grid.row_cells(row)) + 1):
            text = grid.formula_text(row, col)
            sheet.cell(row=row, column=col, value=text if text is not None else grid.cell(row, col))
    book.save(path)
    solution = formulas.ExcelModel().loads(str(path)).finish().calculate()
    engine = {}
    for key, value in solution.items():
        match = isinstance(key, str) and _KEY.match(key)
        if match:
            engine[match.group(2) + match.group(3)] = value.value[0, 0]
    for offset, kind in enumerate(kinds):
        row = 4 + offset
        mine = grid.value(row, 1)
        theirs = engine[f"A{row}"]
        if isinstance(mine, bool):
            assert bool(theirs) is mine, kind
        else:
            assert mine == pytest.approx(theirs), kind
