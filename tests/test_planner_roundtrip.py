"""The planner round trip: exact figures in the workbook, read back by `check` and `config-from`.

The planner's per-IPU figures are recalculated by an independent engine (the
``formulas`` package) after typing a split into the IPU column; for every
contiguous split they must equal, to the byte, what ``popliner check``
computes for the same split. Bad edits must fail with one line naming the cell.
"""

from __future__ import annotations

import csv
import io
import itertools
import os
import re
import shutil
from pathlib import Path
from typing import Any

import openpyxl
import pytest
from click.testing import CliRunner

from popliner.analysis import AnalysisOptions, load_analysis
from popliner.breakdown import build_breakdown
from popliner.cli import cli
from popliner.config.planner import read_planner
from popliner.config.yaml_io import read_config
from popliner.errors import ConfigError
from popliner.writers import xlsx
from popliner.writers.planner import FIRST_LAYER_ROW, FITS_ROW, STATUS_ROW, WORST_ROW
from tests.helpers import FIXTURES
from tests.procs import run_group

IPUS = 3


def _workbook(tmp_path: Path, fixture: str, mode: str) -> tuple[Path, Any]:
    analysis = load_analysis(str(FIXTURES / fixture), AnalysisOptions(mode=mode))  # type: ignore[arg-type]
    # Without the operation rows the workbook is small and the engine fast; the planner is the same.
    breakdown = build_breakdown(analysis, with_operations=False, planner_ipus=IPUS)
    path = tmp_path / f"{fixture.split('.')[0]}-{mode}.xlsx"
    xlsx.write_workbook(breakdown, path, force=False, budget_bytes=analysis.profile.target.bytes_per_tile,
                        num_ipus=IPUS)
    return path, analysis


def _contiguous_splits(n: int, most: int) -> list[list[int]]:
    """Every split of n layers into at most ``most`` contiguous runs, as an IPU per layer."""
    splits = []
    for k in range(1, min(n, most) + 1):
        for cuts in itertools.combinations(range(1, n), k - 1):
            bounds = [0, *cuts, n]
            splits.append([ipu for ipu in range(k) for _ in range(bounds[ipu], bounds[ipu + 1])])
    return splits


class Recalculated:
    """The workbook loaded once into the independent engine; each call types an IPU column and recalculates."""

    def __init__(self, path: Path) -> None:
        formulas = pytest.importorskip("formulas")
        self.model = formulas.ExcelModel().loads(str(path)).finish()
        first = f"!B{FIRST_LAYER_ROW}"
        self.prefix = next(key[: -len(first) + 1] for key in self.model.dsp.data_nodes
                           if isinstance(key, str) and "]SPLIT PLANNER'!" in key and key.endswith(first))

    def __call__(self, ipus: list[int]) -> tuple[list[int], bool]:
        inputs = {f"{self.prefix}B{FIRST_LAYER_ROW + i}": ipu for i, ipu in enumerate(ipus)}
        solution = self.model.calculate(inputs=inputs)

        def cell(ref: str) -> Any:
            return solution[self.prefix + ref].value[0, 0]

        figures = [int(cell(f"{col}{WORST_ROW}")) for col in "BCD"]
        return figures, bool(cell(f"C{STATUS_ROW}"))


@pytest.mark.parametrize(("fixture", "mode"), [
    ("bert-tiny-training.json", "training"),
    ("bert-tiny-inference.json", "inference"),
    ("tiny.json", "training"),
])
def test_planner_equals_check_for_every_contiguous_split(tmp_path: Path, fixture: str, mode: str) -> None:
    path, analysis = _workbook(tmp_path, fixture, mode)
    recalc = Recalculated(path)
    names = analysis.layer_names
    compared = 0
    for ipus in _contiguous_splits(len(names), IPUS):
        figures, exact = recalc(ipus)
        stages = [[names[i] for i, ipu in enumerate(ipus) if ipu == k] for k in range(max(ipus) + 1)]
        expected = [figure.worst_bytes for figure in analysis.pipeline_figures(stages)]
        assert exact, f"{ipus}: a contiguous split must read as exact"
        assert figures[: len(expected)] == expected, f"{fixture} {mode} {ipus}"
        assert all(v == 0 for v in figures[len(expected):])  # IPUs without layers
        compared += len(expected)
    assert compared >= 3


def test_non_contiguous_split_is_marked_as_an_estimate(tmp_path: Path) -> None:
    path, analysis = _workbook(tmp_path, "bert-tiny-training.json", "training")
    figures, exact = Recalculated(path)([0, 1, 0])
    assert not exact
    # The estimate: each IPU's layers' own worst-tile bytes added up (+ the unlayered ops on IPU 0).
    layers = build_breakdown(analysis, with_operations=False, with_totals=False)
    own = [row.worst_tile_bytes for row in layers.layers]
    unlayered = layers.unlayered.worst_tile_bytes if layers.unlayered else 0
    assert figures[:2] == [own[0] + own[2] + unlayered, own[1]]


# ---------------------------------------------------------------------------
# Reading the planner back: check and config-from


def _edit(path: Path, cells: dict[str, Any]) -> Path:
    book = openpyxl.load_workbook(path)
    for cell, value in cells.items():
        book["Split planner"][cell] = value
    edited = path.with_name("edited.xlsx")
    book.save(edited)
    return edited


@pytest.fixture()
def review(tmp_path: Path) -> tuple[Path, Path]:
    """A review workbook of bert-tiny-training made by the CLI, with the profile beside it."""
    profile = tmp_path / "model.json"
    shutil.copy(FIXTURES / "bert-tiny-training.json", profile)
    book = tmp_path / "review.xlsx"
    result = CliRunner().invoke(cli, [str(profile), "-o", str(book), "--num-ipus", "3"])
    assert result.exit_code == 0, result.stderr
    return book, profile


def test_check_reads_the_edited_planner(review: tuple[Path, Path]) -> None:
    book, profile = review
    edited = _edit(book, {"B20": 1, "B21": 2})  # layers 0 | 1 | 2
    result = CliRunner().invoke(cli, ["check", str(edited), "--profile", str(profile)])
    analysis = load_analysis(str(profile), AnalysisOptions(mode="training"))
    expected = [f.worst_bytes for f in analysis.pipeline_figures([["0"], ["1"], ["2"]])]
    budget = analysis.profile.target.bytes_per_tile
    assert result.exit_code == (0 if max(expected) <= budget else 1), result.stderr
    shown = [int(m.replace(",", "")) for m in re.findall(r"^\s*\d+\s+\S+\s+\d+\s+([\d,]+)", result.stdout, re.M)]
    assert shown == expected


def test_config_from_writes_the_planner_split(review: tuple[Path, Path], tmp_path: Path) -> None:
    book, profile = review
    edited = _edit(book, {"B20": 1, "B21": 1})  # layers 0 | 1 2
    out = tmp_path / "pipeline.yaml"
    result = CliRunner().invoke(cli, ["config-from", str(edited), "-o", str(out)])  # profile named in the book
    assert result.exit_code == 0, result.stderr
    cfg = read_config(out)
    assert [s.layers for s in cfg.stages] == [("0",), ("1", "2")]
    assert cfg.mode == "training"
    check = CliRunner().invoke(cli, ["check", str(out), "--profile", str(profile)])
    again = CliRunner().invoke(cli, ["check", str(edited), "--profile", str(profile)])
    assert check.stdout == again.stdout  # the YAML and the workbook check the same split


@pytest.mark.parametrize(("cells", "where", "says"), [
    ({"B20": 1, "B21": 0}, "cell B21", "goes back to IPU 0"),  # non-contiguous
    ({"B20": 7}, "cell B20", "IPU 7 is not one of the planner's IPUs"),  # unknown IPU
    ({"B20": None}, "cell B20", "has no IPU"),  # empty cell
    ({"B20": "two"}, "cell B20", "'two' is not an IPU number"),
    ({"B19": 1}, "cell B19", "the pipeline starts on IPU 0"),
    ({"B20": 2, "B21": 2}, "cell B20", "IPU 1 has no layers"),
])
def test_bad_edits_fail_with_one_line_naming_the_cell(review: tuple[Path, Path], cells: dict[str, Any],
                                                       where: str, says: str) -> None:
    book, profile = review
    edited = _edit(book, cells)
    for args in (["check", str(edited), "--profile", str(profile)], ["config-from", str(edited)]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.stderr
        message = [line for line in result.stderr.splitlines() if line.startswith("popliner: error:")]
        assert len(message) == 1
        assert f"{edited}, sheet Split planner, {where}: " in message[0]
        assert says in message[0]


def test_a_workbook_without_planner_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.xlsx"
    book = openpyxl.Workbook()
    book.active.title = "Sheet1"
    book.save(path)
    with pytest.raises(ConfigError, match="no sheet 'Split planner'"):
        read_planner(path)


# ---------------------------------------------------------------------------
# LibreOffice as a second independent engine

_LO_SETTINGS = """<?xml version="1.0" encoding="UTF-8"?>
<oor:items xmlns:oor="http://openoffice.org/2001/registry" xmlns:xs="http://www.w3.org/2001/XMLSchema"
 xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
<item oor:path="/org.openoffice.Office.Calc/Formula/Load"><prop oor:name="OOXMLRecalcMode" oor:op="fuse">
<value>0</value></prop></item>
</oor:items>
"""
# CSV export of every sheet (-1), cells as shown: file-SheetName.csv per sheet.
_LO_CSV = "csv:Text - txt - csv (StarCalc):44,34,76,1,,0,false,true,false,false,false,-1"


def _soffice() -> str:
    found = shutil.which("soffice")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("LibreOffice (soffice) is missing in CI: .ci/run installs libreoffice-calc-nogui")
        pytest.skip("LibreOffice (soffice) is not installed")
    return found


def _libreoffice_sheet(path: Path, sheet: str, tmp_path: Path) -> list[list[str]]:
    """Open ``path`` in headless LibreOffice, recalculating every formula on load, and read one sheet as shown."""
    profile = tmp_path / "lo-profile"
    (profile / "user").mkdir(parents=True, exist_ok=True)
    (profile / "user" / "registrymodifications.xcu").write_text(_LO_SETTINGS)
    out = tmp_path / "lo-out"
    run_group([_soffice(), f"-env:UserInstallation={profile.as_uri()}", "--headless", "--convert-to", _LO_CSV,
               "--outdir", str(out), str(path)], timeout=180)
    with open(out / f"{path.stem}-{sheet}.csv", newline="", encoding="utf-8") as stream:
        return list(csv.reader(stream))


def test_libreoffice_recalculates_the_edited_planner_to_checks_figures(tmp_path: Path) -> None:
    path, analysis = _workbook(tmp_path, "bert-tiny-training.json", "training")
    book = openpyxl.load_workbook(path)  # openpyxl saves no cached values: LibreOffice must compute them
    for i, ipu in enumerate([0, 1, 2]):
        book["Split planner"][f"B{FIRST_LAYER_ROW + i}"] = ipu
    edited = tmp_path / "edited.xlsx"
    book.save(edited)
    rows = _libreoffice_sheet(edited, "Split planner", tmp_path)
    figures = [int(text.replace(",", "")) for text in rows[WORST_ROW - 1][1:4]]
    expected = [f.worst_bytes for f in analysis.pipeline_figures([["0"], ["1"], ["2"]])]
    assert figures == expected
    budget = analysis.profile.target.bytes_per_tile
    assert rows[FITS_ROW - 1][1:4] == ["TRUE" if v <= budget else "FALSE" for v in expected]  # not 1/0
    assert rows[STATUS_ROW - 1][2] == "TRUE"


def test_libreoffice_reads_the_written_workbook_like_the_csv(tmp_path: Path) -> None:
    """The workbook as written (XlsxWriter), recalculated by LibreOffice: the Layers sheet equals the CSV."""
    path, analysis = _workbook(tmp_path, "bert-tiny-training.json", "training")
    shown = _libreoffice_sheet(path, "Layers", tmp_path)
    from popliner.writers import tables

    stream = io.StringIO(newline="")
    tables.write_layers(build_breakdown(analysis, with_operations=False), stream, "csv")
    expected = list(csv.reader(io.StringIO(stream.getvalue(), newline="")))
    assert len(shown) == len(expected)
    for mine, theirs in zip(expected, shown):
        for a, b in zip(mine, theirs):
            if re.fullmatch(r"-?[\d.]+", a):
                assert float(b.replace(",", "")) == pytest.approx(float(a)), (mine, theirs)
            else:
                assert b == a.removeprefix("'")


# ---------------------------------------------------------------------------
# One figure: the planner beside check and the solver


@pytest.mark.parametrize(("fixture", "mode"), [
    ("bert-tiny-training.json", "training"),
    ("bert-tiny-training.json", "inference"),
    ("bert-tiny-inference.json", "inference"),
    ("bert-base-training.json.gz", "training"),
    ("gpt2-small-inference.json.gz", "inference"),
])
def test_planner_view_equals_check_and_solve(fixture: str, mode: str) -> None:
    from popliner.analysis import solve_split
    from popliner.solvers.problem import SplitProblem
    from tests.planner_reader import planner_figures

    analysis = load_analysis(str(FIXTURES / fixture), AnalysisOptions(mode=mode))  # type: ignore[arg-type]
    names = analysis.layer_names
    budget = analysis.profile.target.bytes_per_tile
    breakdown = build_breakdown(analysis, with_operations=False, with_totals=False, planner_ipus=4)
    half = len(names) // 2
    splits = [[names[:half], names[half:]], [names[:1], names[1:-1], names[-1:]] if len(names) > 2 else [names]]
    split = solve_split(analysis, SplitProblem(num_ipus=4, budget=budget * 4, training=mode == "training"),
                        solver="greedy")
    splits.append([list(stage.layers) for stage in split.stages])
    for stages in splits:
        ipu_of_layer = {layer: k for k, stage in enumerate(stages) for layer in stage}
        planner, exact = planner_figures(breakdown, ipu_of_layer, budget_bytes=budget, num_ipus=4)
        check = [figure.worst_bytes for figure in analysis.pipeline_figures(stages)]
        assert exact
        assert planner[: len(check)] == check, (fixture, mode, stages)
    solved = [stage.worst_tile_bytes for stage in split.stages]
    assert planner[: len(solved)] == solved
