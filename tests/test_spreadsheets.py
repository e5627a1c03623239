"""Review spreadsheets: CSV/TSV tables, the XLSX workbook and the plots.

The breakdown below is small and its numbers round, so every expected figure
can be checked by hand. Formulas are checked against an independent engine
(the ``formulas`` package), never against popliner's own evaluator alone.

Golden files live in tests/golden; ``POPLINER_UPDATE_GOLDEN=1 pytest
tests/test_spreadsheets.py`` rewrites them after an intended change.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import openpyxl
import pytest

from popliner.breakdown import Breakdown, LayerMatrix, LayerRow, OperationRow, RangeTable, TotalsRow
from popliner.errors import OutputExistsError, UsageProblem
from popliner.memory.types import ComponentBytes, StageMemory
from popliner.solvers.result import SplitResult, StageResult
from popliner.writers import plots, tables, xlsx
from popliner.writers.formula import column_letter
from popliner.writers.grid import evaluate_book
from popliner.writers.planner import PLANNER_NOTE, planner_grid, write_planner
from tests.helpers import ipu_memory

GOLDEN = Path(__file__).parent / "golden"
UPDATE_GOLDEN = os.environ.get("POPLINER_UPDATE_GOLDEN") == "1"
BUDGET = 500_000
LAYERS = ("embed", "block0", "head")

# ---------------------------------------------------------------------------
# The hand-made breakdown


def _op(position: int, layer: str | None, note: str, name: str, *kb: int) -> OperationRow:
    memory = ComponentBytes(*(k * 1000 for k in kb))
    return OperationRow(position, layer, note, name, position, position + 1, memory)


def make_breakdown() -> Breakdown:
    """3 layers, 8 operations (four named to look like formulas, one needing CSV quotes)."""
    operations = (
        _op(0, "embed", "name", "embed/gather", 1000, 200, 30, 40, 10),  # 1,280,000
        _op(1, "embed", "inputs", "embed/add", 500, 100, 20, 20, 10),  # 650,000
        _op(2, "block0", "name", "block0/matmul", 4000, 300, 100, 200, 50),  # 4,650,000
        _op(3, "block0", "call", '=HYPERLINK("http://x","y")', 2000, 0, 50, 100, 0),  # 2,150,000
        _op(4, "block0", "name", "+block0/relu", 1000, 100, 10, 30, 10),  # 1,150,000
        _op(5, "head", "name", "-head/softmax", 1500, 200, 40, 50, 20),  # 1,810,000
        _op(6, "head", "inputs-layer-0", "@head/loss", 300, 50, 10, 10, 5),  # 375,000
        _op(7, None, "none", 'host, "copy"', 100, 0, 0, 60, 5),  # 165,000
    )
    layers = (
        LayerRow("embed", 2, ComponentBytes(1_500_000, 300_000, 50_000, 60_000, 20_000), 3, 150_000, 1000),
        LayerRow("block0", 3, ComponentBytes(7_000_000, 400_000, 160_000, 330_000, 60_000), 7, 400_000, 5000),
        LayerRow("head", 2, ComponentBytes(1_800_000, 250_000, 50_000, 60_000, 25_000), 1, 250_000, 2000),
    )
    totals = (
        TotalsRow("Variables", 10_400_000, 10_500_000),
        TotalsRow("Vertex code", 950_000, None),
        TotalsRow("Total (summed over tiles)", 12_230_000, 12_000_000),
    )
    unlayered = LayerRow("(no layer)", 1, ComponentBytes(100_000, 0, 0, 60_000, 5_000), 0, 50_000, 100)
    whole = LayerRow("Whole model on one IPU", 8, ComponentBytes(9_000_000, 900_000, 240_000, 400_000, 100_000),
                     7, 600_000, 8100)
    return Breakdown("model.json", 4, 624_000, operations, layers, totals, unlayered, whole, make_ranges(),
                     "inference", "ab" * 32)


def make_ranges() -> RangeTable:
    """Exact figures of the six ranges of 3 layers, made up (inference: one column; -1 where no split of at
    most 2 IPUs puts the range: block0 alone would leave head for a third IPU)."""
    figures = {(0, 0): 200_000, (0, 1): 560_000, (0, 2): 700_000, (1, 1): -1, (1, 2): 480_000, (2, 2): 250_000}
    values = np.full((3, 3, 1), -1, dtype=np.int64)
    for (i, j), v in figures.items():
        values[i, j, 0] = v
    return RangeTable(LAYERS, False, 2, values)


def make_matrices() -> tuple[LayerMatrix, LayerMatrix]:
    affinity = np.array([[0, 10, 0], [10, 0, 20], [0, 20, 0]], dtype=np.int64) * 1000
    interlayer = np.array([[0, 100, 0], [0, 0, 200], [0, 0, 0]], dtype=np.int64) * 1000
    return LayerMatrix("Affinity", LAYERS, affinity), LayerMatrix("Interlayer", LAYERS, interlayer)


def _stage(index: int, layers: tuple[str, ...], worst: int) -> StageResult:
    memory = ComponentBytes(1, 0, 0, 0, 0)
    return StageResult(index, index, layers, memory, 0, worst, 0, 0, 100, 0, BUDGET)


def make_split() -> SplitResult:
    """embed on IPU 0; block0 and head on IPU 1."""
    stages = (_stage(0, ("embed",), 150_000), _stage(1, ("block0", "head"), 520_000))
    return SplitResult("greedy", "GREEDY", "inference", 2, BUDGET, stages)


# ---------------------------------------------------------------------------
# Helpers


WRITERS: dict[str, Callable[[Any, Any, Any], None]] = {
    "operations": lambda bd, s, f: tables.write_operations(bd, s, f),
    "layers": lambda bd, s, f: tables.write_layers(bd, s, f),
    "totals": lambda bd, s, f: tables.write_totals(bd, s, f),
    "affinity": lambda bd, s, f: tables.write_matrix(make_matrices()[0], s, f),
    "interlayer": lambda bd, s, f: tables.write_matrix(make_matrices()[1], s, f),
    "planner": lambda bd, s, f: write_planner(bd, s, f, budget_bytes=BUDGET, split=make_split()),
}


def render(kind: str, fmt: str) -> str:
    stream = io.StringIO(newline="")
    WRITERS[kind](make_breakdown(), stream, fmt)
    return stream.getvalue()


def parse_rows(text: str, fmt: str) -> list[list[str]]:
    dialect = csv.excel if fmt == "csv" else csv.excel_tab
    return list(csv.reader(io.StringIO(text, newline=""), dialect=dialect))


def typed(text: str) -> int | float | bool | str | None:
    """A CSV/TSV cell as a spreadsheet would take it: blank, number, boolean or text."""
    if text == "":
        return None
    if text in ("TRUE", "FALSE"):
        return text == "TRUE"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


_KEY = re.compile(r"^'\[[^\]]+\](.+)'!([A-Z]+)(\d+)$")


def engine_values(path: Path) -> dict[tuple[str, str], Any]:
    """Every cell of a workbook computed by the `formulas` engine: (SHEET, "A1") -> value."""
    formulas = pytest.importorskip("formulas")
    solution = formulas.ExcelModel().loads(str(path)).finish().calculate()
    values: dict[tuple[str, str], Any] = {}
    for key, ranges in solution.items():
        match = isinstance(key, str) and _KEY.match(key)
        if match:
            values[(match.group(1), match.group(2) + match.group(3))] = ranges.value[0, 0]
    return values


def same(mine: Any, theirs: Any) -> bool:
    """Cell equality across engines: numbers approximately, booleans as booleans, blanks as None."""
    if isinstance(theirs, str) and theirs == "":
        theirs = None
    if isinstance(mine, str) and mine == "":
        mine = None  # a formula giving "" shows as blank
    if isinstance(mine, bool) != isinstance(theirs, (bool, np.bool_)):
        return False
    if isinstance(mine, bool):
        return mine is bool(theirs)
    if isinstance(mine, (int, float)) and not isinstance(theirs, str) and theirs is not None:
        return bool(abs(float(theirs) - mine) < 1e-9)
    return bool(mine == theirs)


def assert_no_errors(values: dict[tuple[str, str], Any]) -> None:
    errors = {key: v for key, v in values.items() if str(v).startswith("#")}
    assert not errors, f"formula errors: {errors}"


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE_GOLDEN:
        GOLDEN.mkdir(exist_ok=True)
        path.write_bytes(text.encode("utf-8"))
    assert path.exists(), f"{path} missing; run with POPLINER_UPDATE_GOLDEN=1"
    assert path.read_bytes().decode("utf-8") == text, f"{name} differs from the golden file"


# ---------------------------------------------------------------------------
# CSV / TSV


def test_operations_csv_by_hand() -> None:
    rows = parse_rows(render("operations", "csv"), "csv")
    assert rows[0][:3] == ["Layer", "Note", "Operation"]
    assert len(rows) == 1 + 8 + 1
    assert rows[1] == ["embed", "name", "embed/gather", "1000000", "200000", "30000", "40000", "10000", "1280000"]
    assert rows[8][0] == ""  # the operation of no layer
    assert rows[-1] == [
        "Sum of the operations", "", "", "10400000", "950000", "260000", "510000", "110000", "12230000"
    ]


def test_layers_csv_by_hand() -> None:
    rows = parse_rows(render("layers", "csv"), "csv")
    assert rows[1][:2] == ["(no layer)", "1"]  # the unlayered operations come first, as in PopLiner
    assert rows[3] == [
        "block0",
        "3",
        "7000000",
        "400000",
        "160000",
        "330000",
        "60000",
        "7950000",
        "8.0",
        "7",
        "400000",
        "5000",
    ]
    mb_column = [row[8] for row in rows[1:-1]]
    assert mb_column == ["0.2", "1.9", "8.0", "2.2", "12.2", "10.6"]  # 7.95 MB rounds half away from zero
    # Every layer row plus the unlayered row, labelled as what it is.
    assert rows[-3] == [
        "Sum of the rows above",
        "8",
        "10400000",
        "950000",
        "260000",
        "510000",
        "110000",
        "12230000",
        "12.2",
        "",
        "",
        "8100",
    ]
    # The model's own total (shared code once) is smaller, and a note says why the two differ.
    assert rows[-2] == ["Whole model on one IPU", "8", "9000000", "900000", "240000", "400000", "100000",
                        "10640000", "10.6", "7", "600000", "8100"]
    assert rows[-1][0] == tables.LAYERS_NOTE and "not the model's total" in rows[-1][0]


def test_totals_csv_by_hand() -> None:
    rows = parse_rows(render("totals", "csv"), "csv")
    assert rows == [
        ["Category", "Model (bytes)", "Ground truth (bytes)", "Difference (bytes)"],
        ["Variables", "10400000", "10500000", "-100000"],
        ["Vertex code", "950000", "", ""],
        ["Total (summed over tiles)", "12230000", "12000000", "230000"],
    ]


def test_matrix_csv_by_hand() -> None:
    rows = parse_rows(render("affinity", "csv"), "csv")
    assert rows[0] == ["Affinity", "embed", "block0", "head", "Total"]
    assert rows[2] == ["block0", "10000", "0", "20000", "30000"]
    assert rows[-1] == ["Sum of the rows above", "10000", "30000", "20000", "60000"]


def test_tsv_carries_formulas_where_values_are_derived() -> None:
    operations = parse_rows(render("operations", "tsv"), "tsv")
    assert operations[1][3:] == ["1000000", "200000", "30000", "40000", "10000", "=SUM(D2:H2)"]
    assert operations[-1][3:] == [
        "=SUM(D2:D9)",
        "=SUM(E2:E9)",
        "=SUM(F2:F9)",
        "=SUM(G2:G9)",
        "=SUM(H2:H9)",
        "=SUM(I2:I9)",
    ]
    layers = parse_rows(render("layers", "tsv"), "tsv")
    assert layers[1][7:9] == ["=SUM(C2:G2)", "=ROUND(H2/1000000,1)"]
    assert layers[-3][1] == "=SUM(B2:B5)"
    assert layers[-3][8] == "=ROUND(H6/1000000,1)"
    totals = parse_rows(render("totals", "tsv"), "tsv")
    assert totals[1][3] == "=B2-C2"
    assert totals[2][3] == ""  # no ground truth, no difference
    matrix = parse_rows(render("interlayer", "tsv"), "tsv")
    assert matrix[-1][-1] == "=SUM(E2:E4)"


def test_unknown_format_is_refused() -> None:
    with pytest.raises(UsageProblem):
        tables.write_layers(make_breakdown(), io.StringIO(), "xls")  # type: ignore[arg-type]


def test_empty_breakdown_writes_headers_and_zero_totals() -> None:
    empty = Breakdown("empty.json", 4, 624_000, (), (), ())
    stream = io.StringIO(newline="")
    tables.write_operations(empty, stream, "tsv")
    rows = parse_rows(stream.getvalue(), "tsv")
    assert rows[-1] == ["Sum of the operations", "", "", "0", "0", "0", "0", "0", "0"]


def _tsv_workbook(path: Path, kinds: list[str]) -> None:
    """Put each TSV table on its own sheet, as a user pasting it would: '=' text becomes a formula."""
    book = openpyxl.Workbook()
    book.remove(book.active)
    for kind in kinds:
        sheet = book.create_sheet(kind)
        for r, row in enumerate(parse_rows(render(kind, "tsv"), "tsv"), start=1):
            for c, text in enumerate(row, start=1):
                value = typed(text)
                if value is not None:
                    sheet.cell(row=r, column=c, value=value)
    book.save(path)


@pytest.mark.slow  # a long case (about 4 s): LibreOffice recalculates every formula
def test_tsv_formulas_evaluate_to_the_csv_values(tmp_path: Path) -> None:
    kinds = list(WRITERS)
    path = tmp_path / "tsv.xlsx"
    _tsv_workbook(path, kinds)
    engine = engine_values(path)
    assert_no_errors(engine)
    compared = 0
    for kind in kinds:
        for r, row in enumerate(parse_rows(render(kind, "csv"), "csv"), start=1):
            for c, text in enumerate(row, start=1):
                expected = typed(text)
                actual = engine.get((kind.upper(), f"{column_letter(c)}{r}"))
                assert same(expected, actual), f"{kind}!{column_letter(c)}{r}: csv {expected!r}, tsv {actual!r}"
                compared += 1
    assert compared > 100


@pytest.mark.parametrize("kind", list(WRITERS))
@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_text_outputs_match_golden_files(kind: str, fmt: str) -> None:
    check_golden(f"review_{kind}.{fmt}", render(kind, fmt))


# ---------------------------------------------------------------------------
# Escaping and quoting


@pytest.mark.parametrize(
    ("name", "escaped"),
    [
        ("=SUM(A1)", "'=SUM(A1)"),
        ("+1", "'+1"),
        ("-x", "'-x"),
        ("@x", "'@x"),
        ("\tx", "'\tx"),
        ("\rx", "'\rx"),
        ("a=b", "a=b"),
        ("plain", "plain"),
        ("", ""),
    ],
)
def test_escape_text(name: str, escaped: str) -> None:
    assert tables.escape_text(name) == escaped


@pytest.mark.parametrize("fmt", ["csv", "tsv"])
def test_names_that_look_like_formulas_are_escaped(fmt: str) -> None:
    names = [row[2] for row in parse_rows(render("operations", fmt), fmt)[1:-1]]
    assert names[3] == """'=HYPERLINK("http://x","y")"""
    assert names[4:7] == ["'+block0/relu", "'-head/softmax", "'@head/loss"]
    assert names[7] == 'host, "copy"'  # csv quoting carries commas and quotes through


def test_layer_names_are_escaped_in_matrices() -> None:
    matrix = LayerMatrix("Affinity", ("=a", "b"), np.zeros((2, 2), dtype=np.int64))
    stream = io.StringIO(newline="")
    tables.write_matrix(matrix, stream, "tsv")
    rows = parse_rows(stream.getvalue(), "tsv")
    assert rows[0][1] == "'=a"
    assert rows[1][0] == "'=a"


def test_workbook_keeps_formula_like_names_as_text(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    xlsx.write_workbook(make_breakdown(), path, force=False, budget_bytes=BUDGET)
    sheet = openpyxl.load_workbook(path)["Operations"]
    cells = {cell.value: cell for row in sheet.iter_rows() for cell in row if isinstance(cell.value, str)}
    hyperlink = cells['=HYPERLINK("http://x","y")']
    assert hyperlink.data_type == "s"  # text, not a formula
    assert hyperlink.quotePrefix
    assert cells["@head/loss"].quotePrefix


# ---------------------------------------------------------------------------
# XLSX


def _write_review(path: Path, split: SplitResult | None = None) -> None:
    xlsx.write_workbook(make_breakdown(), path, force=False, split=split, matrices=make_matrices(), budget_bytes=BUDGET)


def test_workbook_sheets(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path)
    book = openpyxl.load_workbook(path)
    assert book.sheetnames == [
        "Operations", "Layers", "Split planner", "Totals", "Affinity", "Interlayer", "Pipeline figures"
    ]


def test_workbook_formulas_agree_with_popliner_and_csv(tmp_path: Path) -> None:
    """The independent engine computes every workbook cell to popliner's value; tables equal the CSV."""
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    engine = engine_values(path)
    assert_no_errors(engine)
    grids, _ = xlsx.workbook_grids(make_breakdown(), budget_bytes=BUDGET, split=make_split(), matrices=make_matrices())
    values = evaluate_book(grids)
    for grid in grids:
        for r, row in enumerate(values[grid.name], start=1):
            for c, mine in enumerate(row, start=1):
                theirs = engine.get((grid.name.upper(), f"{column_letter(c)}{r}"))
                if mine is None:
                    assert theirs is None or str(theirs) == "empty"  # a blank cell inside a range read
                elif mine == "":
                    assert theirs in ("", None)
                else:
                    assert same(mine, theirs), f"{grid.name}!{column_letter(c)}{r}: {mine!r} vs {theirs!r}"
    for sheet, kind in [
        ("LAYERS", "layers"),
        ("TOTALS", "totals"),
        ("AFFINITY", "affinity"),
        ("INTERLAYER", "interlayer"),
    ]:
        for r, csv_row in enumerate(parse_rows(render(kind, "csv"), "csv"), start=1):
            for c, text in enumerate(csv_row, start=1):
                expected = typed(text)
                actual = engine.get((sheet, f"{column_letter(c)}{r}"))
                if isinstance(expected, str):
                    expected = expected.removeprefix("'")  # the workbook stores names unescaped
                assert same(expected, actual), f"{sheet}!{column_letter(c)}{r}: csv {expected!r}, xlsx {actual!r}"


def test_operations_sheet_groups_by_layer(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path)
    engine = engine_values(path)
    sheet = openpyxl.load_workbook(path)["Operations"]
    column_a = [sheet.cell(row=r, column=1).value for r in range(1, sheet.max_row + 1)]
    assert column_a == [
        "Layer",
        "(no layer)",
        None,  # the operation of no layer, first as on the Layers sheet
        "embed",
        "embed",
        "embed",
        "block0",
        "block0",
        "block0",
        "block0",
        "head",
        "head",
        "head",
        "Sum of the operations",
        xlsx.OPERATIONS_NOTE,
    ]
    # group rows carry the sum of each layer's operations (J) and its MB (K)
    assert [engine[("OPERATIONS", f"J{r}")] for r in (2, 4, 7, 11)] == [165_000, 1_930_000, 7_950_000, 2_185_000]
    assert engine[("OPERATIONS", "K7")] == pytest.approx(8.0)
    # the grand total counts each operation once and matches the CSV total row
    assert engine[("OPERATIONS", "I14")] == 12_230_000
    assert engine[("OPERATIONS", "J14")] == 12_230_000
    levels = [sheet.row_dimensions[r].outline_level for r in range(2, 14)]
    assert levels == [0, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1, 1]


def test_workbook_is_readable(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    book = openpyxl.load_workbook(path)
    assert book["Operations"].freeze_panes == "D2"
    assert book["Layers"].freeze_panes == "B2"
    assert book["Split planner"].freeze_panes == "C19"
    layers = book["Layers"]
    assert layers["C2"].number_format == "#,##0"
    assert layers["I2"].number_format == "0.0"
    assert layers["H6"].font.b  # the sum row is bold
    assert layers.column_dimensions["A"].width >= len("Total") + 2
    assert book.calculation.fullCalcOnLoad
    planner = book["Split planner"]
    assert planner["B3"].number_format == "#,##0"
    assert planner["J19"].number_format == "0.0"
    ranges = {str(rng.sqref) for rng in planner.conditional_formatting}
    assert {"B12:C12", "B13:C13", "B14:C14", "C3", "C19:C21", "B19:B21"} <= ranges
    validations = planner.data_validations.dataValidation
    assert [str(v.sqref) for v in validations] == ["B19:B21"]
    assert (validations[0].formula1, validations[0].formula2) == ("0", "1")


def test_workbook_matches_golden_file(tmp_path: Path) -> None:
    """Values and formulas as openpyxl reads them back (not the zip bytes, which carry dates)."""
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    book = openpyxl.load_workbook(path)
    dump = {
        sheet.title: {
            "freeze": sheet.freeze_panes,
            "cells": {
                cell.coordinate: cell.value for row in sheet.iter_rows() for cell in row if cell.value is not None
            },
        }
        for sheet in book.worksheets
    }
    check_golden("review_workbook.json", json.dumps(dump, indent=1, sort_keys=True) + "\n")


def test_workbook_needs_xlsx_suffix(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem):
        xlsx.write_workbook(make_breakdown(), tmp_path / "review.csv", force=False, budget_bytes=BUDGET)


def test_long_or_odd_matrix_titles_become_legal_sheet_names() -> None:
    odd = LayerMatrix("Bytes [in/out]: layer*layer? and a long tail", LAYERS, np.zeros((3, 3), dtype=np.int64))
    grids, _ = xlsx.workbook_grids(make_breakdown(), budget_bytes=BUDGET, matrices=[odd, odd])
    names = [g.name for g in grids[4:6]]
    assert all(len(n) <= 31 and not re.search(r"[\[\]:*?/\\]", n) for n in names)
    assert len(set(names)) == 2


# ---------------------------------------------------------------------------
# Split planner


def _planner_figures(engine: dict[tuple[str, str], Any]) -> dict[str, list[Any]]:
    rows = {"layers": 8, "first": 9, "last": 10, "contiguous": 11, "worst": 12, "headroom": 13, "fits": 14,
            "estimate": 15, "total": 16, "mb": 17}
    return {
        name: [engine.get(("SPLIT PLANNER", f"{col}{row}")) for col in ("B", "C")] for name, row in rows.items()
    } | {"unplaced": [engine.get(("SPLIT PLANNER", "C3"))], "used": [engine.get(("SPLIT PLANNER", "B6"))],
         "exact": [engine.get(("SPLIT PLANNER", "C6"))]}


def _normalise(figures: dict[str, list[Any]]) -> dict[str, list[Any]]:
    return {k: [bool(v) if isinstance(v, (bool, np.bool_)) else float(v) for v in vs] for k, vs in figures.items()}


def _edited(tmp_path: Path, ipus: dict[str, int | None]) -> dict[str, list[Any]]:
    """Type IPU numbers into the planner (cell -> IPU), save, recalculate with the independent engine."""
    path = tmp_path / "review.xlsx"
    if not path.exists():
        _write_review(path, make_split())
    book = openpyxl.load_workbook(path)
    for cell, ipu in ipus.items():
        book["Split planner"][cell] = ipu
    edited = tmp_path / "edited.xlsx"
    book.save(edited)
    engine = engine_values(edited)
    assert_no_errors(engine)
    return _normalise(_planner_figures(engine))


def test_planner_is_prefilled_from_the_split(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    sheet = openpyxl.load_workbook(path)["Split planner"]
    assert [sheet[f"B{r}"].value for r in (19, 20, 21)] == [0, 1, 1]
    assert [sheet[f"A{r}"].value for r in (19, 20, 21)] == list(LAYERS)
    assert sheet["B3"].value == BUDGET
    assert sheet["A2"].value == PLANNER_NOTE
    assert "exact" in PLANNER_NOTE and "popliner check" in PLANNER_NOTE
    assert sheet["B15"].value == "=SUMIF($B$19:$B$21,B$7,$C$19:$C$21)+$B$5"
    assert sheet["C12"].value == (
        "=IF(C8=0,0,IF($C$6,INDEX('Pipeline figures'!$F$2:$F$7,MATCH((C9*3)+C10,'Pipeline figures'!$A$2:$A$7,0),1),"
        "C15))"
    )
    assert sheet["B14"].value == "=B12<=$B$3"
    figures = _normalise(_planner_figures(engine_values(path)))
    assert figures == {
        "layers": [1, 2],
        "first": [0, 1],
        "last": [0, 2],
        "contiguous": [True, True],
        "worst": [200_000, 480_000],  # looked up: ranges 0..0 and 1..2
        "headroom": [300_000, 20_000],
        "fits": [True, True],
        "estimate": [200_000, 650_000],  # 150,000 + 50,000 (no layer) | 400,000 + 250,000
        "total": [1_930_000, 10_135_000],
        "mb": [1.9, 10.1],
        "unplaced": [0],
        "used": [2],
        "exact": [True],
    }


def test_planner_looks_up_another_contiguous_split(tmp_path: Path) -> None:
    """Move block0 to IPU 0: ranges 0..1 and 2..2, figures from the table, by hand."""
    figures = _edited(tmp_path, {"B20": 0})
    assert figures["exact"] == [True]
    assert figures["worst"] == [560_000, 250_000]
    assert figures["fits"] == [False, True]
    assert figures["headroom"] == [-60_000, 250_000]


def test_planner_falls_back_to_the_estimate_when_not_contiguous(tmp_path: Path) -> None:
    """Move head to IPU 0: IPU 0 holds embed and head around IPU 1's block0."""
    figures = _edited(tmp_path, {"B21": 0})
    assert figures["exact"] == [False]
    assert figures["contiguous"] == [False, False]  # IPU 0 in two runs; IPU 1 does not follow IPU 0's last layer
    assert figures["worst"] == [450_000, 400_000]  # 150,000 + 250,000 + 50,000 | 400,000
    assert figures["total"] == [4_115_000, 7_950_000]


def test_planner_counts_layers_on_no_listed_ipu(tmp_path: Path) -> None:
    figures = _edited(tmp_path, {"B20": 5})  # an IPU without a column
    assert figures["unplaced"] == [1]
    assert figures["layers"] == [1, 1]
    assert figures["exact"] == [False]


def test_planner_one_ipu_is_exact(tmp_path: Path) -> None:
    figures = _edited(tmp_path, {"B20": 0, "B21": 0})
    assert figures["used"] == [1]
    assert figures["exact"] == [True]
    assert figures["worst"] == [700_000, 0]


def test_planner_without_split_puts_everything_on_ipu_0() -> None:
    grid, layout = planner_grid(make_breakdown(), budget_bytes=BUDGET)
    assert layout.num_ipus == 2  # 800,000 worst-tile bytes over a 500,000 budget
    assert [grid.value(r, 2) for r in (19, 20, 21)] == [0, 0, 0]
    assert [grid.value(15, c) for c in (2, 3)] == [850_000, 0]
    # The exact figure needs the Pipeline figures sheet: evaluate with the whole book.
    grids, _ = xlsx.workbook_grids(make_breakdown(), budget_bytes=BUDGET)
    book = {g.name: g for g in grids}
    assert grid.value(12, 2, book) == 700_000
    assert grid.value(14, 2, book) is False


def test_planner_leaves_unsplit_layers_blank() -> None:
    split = SplitResult("greedy", "GREEDY", "inference", 2, BUDGET, (_stage(0, ("embed", "block0"), 0),))
    grid, _ = planner_grid(make_breakdown(), budget_bytes=BUDGET, split=split)
    assert [grid.value(r, 2) for r in (19, 20, 21)] == [0, 0, None]
    assert grid.value(3, 3) == 1
    grid.put(21, 2, 1)  # the grid itself recalculates too
    assert grid.value(3, 3) == 0
    assert grid.value(15, 3) == 250_000


def test_planner_refuses_a_bad_budget() -> None:
    with pytest.raises(UsageProblem):
        planner_grid(make_breakdown(), budget_bytes=0)


def test_empty_breakdown_workbook(tmp_path: Path) -> None:
    path = tmp_path / "empty.xlsx"
    xlsx.write_workbook(Breakdown("e.json", 4, 624_000, (), (), ()), path, force=False, budget_bytes=BUDGET)
    assert_no_errors(engine_values(path))


# ---------------------------------------------------------------------------
# Atomic writes


def test_table_write_that_fails_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "ops.csv"
    with pytest.raises(RuntimeError), tables.open_table(path, force=False) as stream:
        tables.write_operations(make_breakdown(), stream, "csv")
        raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_table_is_not_overwritten_without_force(tmp_path: Path) -> None:
    path = tmp_path / "ops.tsv"
    path.write_text("keep me")
    with pytest.raises(OutputExistsError), tables.open_table(path, force=False) as stream:
        tables.write_operations(make_breakdown(), stream, "tsv")
    assert path.read_text() == "keep me"
    with tables.open_table(path, force=True) as stream:
        tables.write_operations(make_breakdown(), stream, "tsv")
    assert path.read_bytes().decode() == render("operations", "tsv")


def test_workbook_write_that_fails_midway_leaves_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "review.xlsx"
    path.write_bytes(b"old")
    with pytest.raises(OutputExistsError):
        _write_review(path)
    assert path.read_bytes() == b"old"

    def broken_save(self: Any) -> None:
        raise OSError("disk full")

    import xlsxwriter

    monkeypatch.setattr(xlsxwriter.Workbook, "close", broken_save)
    with pytest.raises(OSError):
        xlsx.write_workbook(make_breakdown(), path, force=True, budget_bytes=BUDGET)
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["review.xlsx"]


def test_plot_write_that_fails_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from matplotlib.figure import Figure

    def broken_savefig(self: Any, stream: Any, **kwargs: Any) -> None:
        stream.write(b"\x89PNG partial")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", broken_savefig)
    with pytest.raises(OSError):
        plots.plot_layers(make_breakdown(), tmp_path / "layers.png", budget_bytes=BUDGET, force=False)
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------------------
# Plots


def _stage_memory() -> StageMemory:
    tiles = np.arange(16)
    per_tile = np.vstack([1000 + 100 * tiles, 200 + 0 * tiles, 50 * (tiles % 3), 30 + tiles, 10 + 0 * tiles])
    return StageMemory(per_tile.astype(np.int64))


def _ipu_memories() -> list[StageResult]:
    first = _stage_memory().per_tile
    return [ipu_memory(0, ("0", "1"), first, np.full(16, 400, np.int64), 3000),
            ipu_memory(1, ("2",), first // 2, np.zeros(16, np.int64), 3000)]


PLOTS: dict[str, Callable[[Path, bool], None]] = {
    "layers": lambda p, f: plots.plot_layers(make_breakdown(), p, budget_bytes=BUDGET, force=f),
    "split": lambda p, f: plots.plot_split(make_split(), p, force=f),
    "tiles": lambda p, f: plots.plot_tiles(_ipu_memories(), p, force=f),
}


def _png_is_valid(data: bytes) -> bool:
    """The signature, then chunks whose CRCs check out, ending with IEND."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        return False
    offset = 8
    while offset < len(data):
        length: int = struct.unpack(">I", data[offset : offset + 4])[0]
        kind = data[offset + 4 : offset + 8]
        body = data[offset + 8 : offset + 8 + length]
        crc: int = struct.unpack(">I", data[offset + 8 + length : offset + 12 + length])[0]
        if zlib.crc32(kind + body) != crc:
            return False
        offset += 12 + length
        if kind == b"IEND":
            return offset == len(data)
    return False


@pytest.mark.parametrize("kind", list(PLOTS))
def test_png_plots_are_valid_and_stable(kind: str, tmp_path: Path) -> None:
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    PLOTS[kind](first, False)
    PLOTS[kind](second, False)
    data = first.read_bytes()
    assert _png_is_valid(data)
    assert b"Software" not in data
    assert data == second.read_bytes()


@pytest.mark.parametrize("kind", list(PLOTS))
def test_svg_plots_are_valid_and_deterministic(kind: str, tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    PLOTS[kind](first, False)
    PLOTS[kind](second, False)
    root = ET.fromstring(first.read_bytes())
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert b"<dc:date>" not in first.read_bytes()
    assert first.read_bytes() == second.read_bytes()


def test_plot_needs_png_or_svg_and_force_to_overwrite(tmp_path: Path) -> None:
    with pytest.raises(UsageProblem):
        PLOTS["layers"](tmp_path / "layers.pdf", False)
    existing = tmp_path / "split.png"
    existing.write_bytes(b"keep")
    with pytest.raises(OutputExistsError):
        PLOTS["split"](existing, False)
    assert existing.read_bytes() == b"keep"
    PLOTS["split"](existing, True)
    assert _png_is_valid(existing.read_bytes())


# ---------------------------------------------------------------------------
# Several tables in one stream; a workbook every reader sees with numbers


def _stream_of_tables(fmt: str) -> str:
    breakdown = make_breakdown()
    grids = [
        tables.operations_grid(breakdown),
        tables.layers_grid(breakdown),
        tables.totals_grid(breakdown.totals),
        *(tables.matrix_grid(m) for m in make_matrices()),
    ]
    stream = io.StringIO(newline="")
    tables.write_grids(grids, stream, fmt)  # type: ignore[arg-type]
    return stream.getvalue()


def test_several_tables_in_one_tsv_point_at_their_own_rows(tmp_path: Path) -> None:
    """Paste the whole TSV stream at A1 of one sheet; the engine must give the CSV stream's values."""
    rows = parse_rows(_stream_of_tables("tsv"), "tsv")
    book = openpyxl.Workbook()
    sheet = book.active
    sheet.title = "Pasted"
    for r, row in enumerate(rows, start=1):
        for c, text in enumerate(row, start=1):
            value = typed(text)
            if value is not None:
                sheet.cell(row=r, column=c, value=value)
    path = tmp_path / "pasted.xlsx"
    book.save(path)
    engine = engine_values(path)
    assert_no_errors(engine)
    expected_rows = parse_rows(_stream_of_tables("csv"), "csv")
    assert len(expected_rows) == len(rows)
    compared = 0
    for r, row in enumerate(expected_rows, start=1):
        for c, text in enumerate(row, start=1):
            expected = typed(text)
            actual = engine.get(("PASTED", f"{column_letter(c)}{r}"))
            assert same(expected, actual), f"{column_letter(c)}{r}: csv {expected!r}, pasted tsv {actual!r}"
            compared += 1
    assert compared > 150
    # The layers table starts on line 12 (operations: header, 8 rows, sum, then a blank line), so its
    # first row total reads row 13, not row 2 as it would alone.
    assert rows[12][7] == "=SUM(C13:G13)"


def _workbook_csv(grid: Any, book: Any) -> list[list[Any]]:
    stream = io.StringIO(newline="")
    tables.write_grid(grid, stream, "csv", book=book)
    return [[typed(text) for text in row] for row in parse_rows(stream.getvalue(), "csv")]


def test_pandas_reads_the_same_numbers_as_the_csv_on_every_sheet(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    frames = pd.read_excel(path, sheet_name=None, header=None)
    grids, _ = xlsx.workbook_grids(make_breakdown(), budget_bytes=BUDGET, split=make_split(), matrices=make_matrices())
    assert list(frames) == [g.name for g in grids]
    numbers = 0
    book = {g.name: g for g in grids}
    for grid in grids:
        frame = frames[grid.name]
        for r, row in enumerate(_workbook_csv(grid, book)):
            for c, expected in enumerate(row):
                actual = frame.iat[r, c] if r < frame.shape[0] and c < frame.shape[1] else None
                if expected is None:
                    assert actual is None or pd.isna(actual), f"{grid.name} {column_letter(c + 1)}{r + 1}"
                elif isinstance(expected, str):
                    assert str(actual) == expected.removeprefix("'")
                elif isinstance(expected, bool):
                    assert actual is expected or actual == expected, f"{grid.name} {column_letter(c + 1)}{r + 1}"
                else:
                    assert not pd.isna(actual), f"{grid.name} {column_letter(c + 1)}{r + 1} reads as NaN"
                    assert float(actual) == pytest.approx(expected), f"{grid.name} {column_letter(c + 1)}{r + 1}"
                    numbers += 1
    assert numbers > 200


def test_formula_cells_carry_values_and_booleans_read_as_booleans(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    formulas_book = openpyxl.load_workbook(path)
    values_book = openpyxl.load_workbook(path, data_only=True)
    layers_f, layers_v = formulas_book["Layers"], values_book["Layers"]
    assert layers_f["H3"].value == "=SUM(C3:G3)"  # the formula is kept
    assert layers_v["H3"].value == 1_930_000  # and its value is there without recalculation
    planner_v = values_book["Split planner"]
    fits = [cell for row in planner_v.iter_rows() for cell in row if isinstance(cell.value, bool)]
    assert fits, "the planner's fit flags are booleans"
    assert all(cell.number_format == xlsx.BOOL_FORMAT for cell in fits)
    assert formulas_book.calculation.fullCalcOnLoad  # spreadsheet programs still recalculate


def test_sheet_names_are_short_and_whole() -> None:
    long = LayerMatrix("Memory affinity (bytes of variables both layers use)", LAYERS, np.zeros((3, 3), np.int64))
    named = LayerMatrix("Memory affinity (bytes of variables both layers use)", LAYERS, np.zeros((3, 3), np.int64),
                        sheet="Affinity")
    grids, _ = xlsx.workbook_grids(make_breakdown(), budget_bytes=BUDGET, matrices=[named, long])
    assert [g.name for g in grids[4:6]] == ["Affinity", "Memory affinity"]


def test_every_number_column_has_a_format(tmp_path: Path) -> None:
    path = tmp_path / "review.xlsx"
    _write_review(path, make_split())
    book = openpyxl.load_workbook(path)
    layers = book["Layers"]
    formats = {layers.cell(row=1, column=c).value: layers.column_dimensions[column_letter(c)] for c in range(2, 13)}
    assert all(dim.width for dim in formats.values())
    assert [layers.cell(row=3, column=c).number_format for c in range(2, 13)] == [
        "0", *["#,##0"] * 6, "0.0", "0", "#,##0", "#,##0"
    ]
