"""Issue 22, point 5: review workbooks are read lazily, within a size limit, and never with a DTD.

Each hostile workbook is a real review workbook with one part changed
(:mod:`tests.workbook_bombs`). Before the guard, a 480 KB workbook with a
large extra sheet took 95 s and 2.8 GB to check, and a DTD with a
billion-laughs chain gave an internal error (exit 70).
"""

from __future__ import annotations

import time
import zipfile
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
from click.testing import CliRunner

from popliner.cli import cli
from popliner.config.workbook import DEFAULT_MAX_WORKBOOK_BYTES
from popliner.errors import EXIT_BAD_INPUT
from tests import workbook_bombs as bombs
from tests.helpers import FIXTURES

REPO = Path(__file__).resolve().parent.parent
TINY = FIXTURES / "tiny.json"


@pytest.fixture(scope="module")
def review(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("review") / "review.xlsx"
    r = CliRunner().invoke(cli, ["-q", str(TINY), "-o", str(path), "--solve", "--num-ipus", "2"])
    assert r.exit_code == 0, r.stderr
    return path


def _check(workbook: Path, *extra: str) -> tuple[int, str, str, float]:
    started = time.monotonic()
    r = CliRunner().invoke(cli, ["-q", "check", str(workbook), "--profile", str(TINY), *extra])
    return r.exit_code, r.stdout, r.stderr, time.monotonic() - started


def _config_from(workbook: Path) -> tuple[int, str]:
    r = CliRunner().invoke(cli, ["-q", "config-from", str(workbook), "--profile", str(TINY)])
    return r.exit_code, r.stderr


def _planner_part(workbook: Path) -> str:
    """The zip part of the planner sheet, by the workbook's own relationships."""
    with zipfile.ZipFile(workbook) as z:
        book = ET.fromstring(z.read("xl/workbook.xml"))
        rels = ET.fromstring(z.read("xl/_rels/workbook.xml.rels"))
    main = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
    rid = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}id"
    wanted = next(s.get(rid) for s in book.iter(f"{main}sheet") if s.get("name") == "Split planner")
    target = next(r.get("Target") for r in rels if r.get("Id") == wanted)
    return "xl/" + str(target).lstrip("/").removeprefix("xl/")


def _one_line(stderr: str, *needles: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("popliner: error: "), stderr
    assert "Traceback" not in stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


def test_a_huge_sheet_of_another_name_is_never_read(review: Path, tmp_path: Path) -> None:
    # 1.5 M rows: about 80 MB unpacked, more than the limit, in a 0.3 MB file. Reading it in full took
    # openpyxl some 40 s; read-only, only the planner sheet is parsed and the result is the plain one's.
    bomb = bombs.with_huge_sheet(review, tmp_path / "bomb.xlsx", 1_500_000)
    with zipfile.ZipFile(bomb) as z:
        assert z.getinfo("xl/worksheets/sheet99.xml").file_size > DEFAULT_MAX_WORKBOOK_BYTES
    plain = _check(review)
    code, out, err, seconds = _check(bomb)
    assert (code, err) == (0, ""), err
    assert out == plain[1]
    assert seconds < 10, seconds


def test_shared_strings_past_the_limit_are_refused_before_parsing(review: Path, tmp_path: Path) -> None:
    # 200 k strings of 200 characters: 40 MB declared, refused by its declared size, unread.
    bomb = bombs.with_huge_shared_strings(review, tmp_path / "strings.xlsx", 200_000, 200)
    code, _, err, seconds = _check(bomb)
    assert code == EXIT_BAD_INPUT
    _one_line(err, str(bomb), "xl/sharedStrings.xml", "POPLINER_MAX_WORKBOOK_BYTES", f"{DEFAULT_MAX_WORKBOOK_BYTES:,}")
    assert seconds < 5, seconds


def test_the_limit_also_counts_the_bytes_as_they_unpack(review: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A limit that the parts read in full fit by their declared sizes, but not with the planner sheet as
    # it streams: the count while reading is the backstop for parts whose size is not known up front.
    with zipfile.ZipFile(review) as z:
        whole = [i.file_size for i in z.infolist() if i.filename.endswith((".xml", ".rels"))
                 and not i.filename.startswith("xl/worksheets/")]
    monkeypatch.setenv("POPLINER_MAX_WORKBOOK_BYTES", str(sum(whole) + 100))
    code, _, err, _ = _check(review)
    assert code == EXIT_BAD_INPUT
    _one_line(err, "xl/worksheets/", "over the", "POPLINER_MAX_WORKBOOK_BYTES")
    monkeypatch.setenv("POPLINER_MAX_WORKBOOK_BYTES", "lots")
    code, _, err, _ = _check(review)
    assert code == EXIT_BAD_INPUT
    _one_line(err, "POPLINER_MAX_WORKBOOK_BYTES='lots'")


@pytest.mark.parametrize(("member", "laughs", "encoding"), [
    ("xl/workbook.xml", False, "utf-8"),
    ("xl/workbook.xml", True, "utf-8"),  # the billion-laughs chain: exit 70 before
    ("xl/workbook.xml", False, "utf-16"),
    ("xl/sharedStrings.xml", False, "utf-8"),
    ("planner", False, "utf-8"),  # the planner sheet itself, read as it streams
])
def test_a_dtd_or_entities_are_refused(review: Path, tmp_path: Path, member: str, laughs: bool,
                                       encoding: str) -> None:
    if member == "planner":
        member = _planner_part(review)
    hostile = bombs.with_dtd(review, tmp_path / "dtd.xlsx", member, laughs=laughs, encoding=encoding)
    with zipfile.ZipFile(hostile) as z:
        assert "<!DOCTYPE".encode(encoding.replace("utf-16", "utf-16-le")) in z.read(member)
    code, _, err, _ = _check(hostile)
    assert code == EXIT_BAD_INPUT
    _one_line(err, str(hostile), member, "DTD")
    code, err = _config_from(hostile)
    assert code == EXIT_BAD_INPUT
    _one_line(err, member, "DTD")


def test_not_a_workbook(tmp_path: Path) -> None:
    fake = tmp_path / "fake.xlsx"
    fake.write_bytes(b"PK\x03\x04 not really a zip")
    code, _, err, _ = _check(fake)
    assert code == EXIT_BAD_INPUT
    _one_line(err, str(fake), "not a readable .xlsx workbook")


# -- found by the workbook structural fuzz (scripts/fuzz_workbook.py) --------------------------------


def _training_review(tmp_path: Path) -> Path:
    path = tmp_path / "training.xlsx"
    r = CliRunner().invoke(cli, ["-q", str(FIXTURES / "tiny-training.json"), "-o", str(path),
                                 "--num-ipus", "2"])
    assert r.exit_code == 0, r.stderr
    return path


def test_training_options_nested_too_deep_are_one_line(tmp_path: Path) -> None:
    """G4's JSON nested 100,000 deep was an internal error (RecursionError, exit 70)."""
    import openpyxl

    path = _training_review(tmp_path)
    book = openpyxl.load_workbook(path)
    book["Split planner"]["G4"] = "[" * 16_000 + "]" * 16_000  # deep enough for json's recursion limit
    book.save(path)
    r = CliRunner().invoke(cli, ["-q", "check", str(path), "--profile",
                                 str(FIXTURES / "tiny-training.json")])
    assert r.exit_code == EXIT_BAD_INPUT, r.stderr
    _one_line(r.stderr, "sheet Split planner, cell G4", "nested too deeply")


@pytest.mark.slow  # about 12 s
def test_a_planner_table_of_too_many_rows_is_refused_and_kept_narrow(
        review: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """200,000 typed-in rows held 1,029 columns each (1.7 GB); past the row limit they are refused."""
    import tracemalloc

    import openpyxl

    from popliner.config.planner import read_planner

    book = openpyxl.load_workbook(review)
    sheet = book["Split planner"]
    header = next(r for r in range(1, 60) if sheet.cell(row=r, column=1).value == "Layer")
    for k in range(20_000):
        sheet.cell(row=header + 1 + k, column=1, value=f"x{k}")
        sheet.cell(row=header + 1 + k, column=2, value=0)
    path = tmp_path / "long.xlsx"
    book.save(path)
    monkeypatch.setenv("POPLINER_MAX_PLANNER_LAYERS", "19999")
    with pytest.raises(Exception, match=rf"cell A{header + 20_000}: the layer table goes on past 19,999 rows"):
        read_planner(path)
    monkeypatch.setenv("POPLINER_MAX_PLANNER_LAYERS", "20000")
    tracemalloc.start()
    try:
        choice = read_planner(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert choice.stages == (tuple(f"x{k}" for k in range(20_000)),)
    assert peak < 80 << 20  # the full width: 20,000 rows x 1,029 columns x 8 bytes = 165 MB
