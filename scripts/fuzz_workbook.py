"""Structural fuzz cases for review workbooks (``fuzz.py --structural N``), given to ``check`` and ``config-from``.

Each case starts from a workbook popliner wrote (``popliner PROFILE -o
review.xlsx``) and changes its shape the way a person editing it, another
spreadsheet program or an attacker might:

==================  ==============================================================
cell_missing        every filled cell of the planner sheet emptied in turn
wrong_type          the cells popliner reads (labels, budget, mode, profile,
                    training options, IPU row, layer table) given a value of
                    another type: text, a fraction, a boolean, a date, an
                    error value, a long text, spaces
number_bounds       the numbers popliner reads at 0, -1, 2^31, 2^63, 1e308,
                    the smallest float, and as text inf and NaN in the XML
formulas            formulas where values belong (no cached value, an
                    external link, a DDE call, a formula error)
huge_counts         10,000 and 200,000 layer rows, 2,000 IPU columns, a
                    layer name of 32,767 characters, a 1 MB training option
deep_nesting        the training options' JSON nested 100,000 deep, XML
                    elements nested 100,000 deep in the planner sheet and in
                    the shared strings
xml_structure       every part of the zip removed in turn, replaced by
                    nothing, by bytes that are no XML, by UTF-16 text, or
                    given a DTD; the planner sheet renamed or twice; the zip
                    cut short
==================  ==============================================================

Every case must end in exit 0, a one-line exit 2, or 1 from ``check`` (an
IPU over budget), within the time and memory bounds, and leave no output
file behind when it fails.
"""

from __future__ import annotations

import datetime
import io
import json
import random
import re
import zipfile
from collections.abc import Callable, Iterator
from typing import Any

WORKBOOK_KINDS = ("cell_missing", "wrong_type", "number_bounds", "formulas", "huge_counts", "deep_nesting",
                  "xml_structure")
PLANNER = "Split planner"
#: (kind, label, workbook bytes)
WorkbookCase = tuple[str, str, bytes]


def _load(base: bytes) -> Any:
    import openpyxl

    return openpyxl.load_workbook(io.BytesIO(base))


def _save(book: Any) -> bytes:
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def _edited(base: bytes, edit: Callable[[Any], None]) -> bytes:
    """The workbook with ``edit`` applied to its planner sheet (openpyxl: every sheet is written again)."""
    book = _load(base)
    edit(book[PLANNER])
    return _save(book)


def _filled_cells(base: bytes) -> list[str]:
    sheet = _load(base)[PLANNER]
    return [c.coordinate for row in sheet.iter_rows() for c in row if c.value is not None]


def _read_cells(base: bytes) -> dict[str, str]:
    """The cells popliner's planner reader looks at, by role (found from the labels, as the reader does)."""
    sheet = _load(base)[PLANNER]
    rows = {str(sheet.cell(row=r, column=1).value): r for r in range(1, 61) if sheet.cell(row=r, column=1).value}
    header = rows["Layer"]
    mode, budget, ipu = rows["Mode"], rows["Budget per tile (bytes)"], rows["IPU"]
    return {
        "budget label": f"A{budget}", "budget": f"B{budget}", "mode label": f"A{mode}", "mode": f"B{mode}",
        "profile": f"D{mode}", "profile sha256": f"E{mode}", "training options": f"G{mode}",
        "IPU label": f"A{ipu}", "IPU 0 heading": f"B{ipu}", "IPU 1 heading": f"C{ipu}",
        "Layer heading": f"A{header}", "IPU heading": f"B{header}", "first layer": f"A{header + 1}",
        "first layer's IPU": f"B{header + 1}", "second layer": f"A{header + 2}", "second layer's IPU": f"B{header + 2}",
        "row after the table": f"A{header + 3}",
    }


def _set(cell: str, value: Any) -> Callable[[Any], None]:
    def edit(sheet: Any) -> None:
        sheet[cell] = value
    return edit


def cell_missing(base: bytes) -> Iterator[WorkbookCase]:
    for cell in _filled_cells(base):
        yield "cell_missing", f"{cell} emptied", _edited(base, _set(cell, None))


WRONG_TYPES: list[Any] = ["x", "", "   ", 1.5, -1, True, False, datetime.datetime(2026, 11, 26), "#REF!", "1e3", " 0 ",
                          "x" * 32_767, "\u202eevil\u2066", "0\n1"]


def wrong_type(base: bytes, rng: random.Random, n: int) -> Iterator[WorkbookCase]:
    picks = [(role, cell, v) for role, cell in _read_cells(base).items() for v in WRONG_TYPES]
    for role, cell, value in rng.sample(picks, min(n, len(picks))):
        shown = repr(value) if len(repr(value)) < 40 else f"{type(value).__name__} of {len(value)}"
        yield "wrong_type", f"{role} ({cell}) = {shown}", _edited(base, _set(cell, value))


NUMBERS: list[Any] = [0, -1, 1, 2**31, 2**53 + 1, 2**63 - 1, -(2**63), 1e308, -1e308, 5e-324, 0.5, -0.0]


def number_bounds(base: bytes) -> Iterator[WorkbookCase]:
    cells = _read_cells(base)
    for role in ("budget", "IPU 0 heading", "IPU 1 heading", "first layer's IPU", "second layer's IPU",
                 "first layer"):
        for value in NUMBERS:
            yield "number_bounds", f"{role} ({cells[role]}) = {value!r}", _edited(base, _set(cells[role], value))
        # What openpyxl cannot write: the XML value text itself.
        for text in ("inf", "-inf", "NaN", "1e999", "9" * 400, "0x10", ""):
            yield "number_bounds", f"{role} ({cells[role]}) <v>{text[:12]}</v>", _xml_value(base, cells[role], text)


def _planner_part(base: bytes) -> str:
    """The zip member of the planner sheet (through the workbook's relationships)."""
    with zipfile.ZipFile(io.BytesIO(base)) as z:
        book = z.read("xl/workbook.xml").decode()
        rels = z.read("xl/_rels/workbook.xml.rels").decode()
    rid = re.search(rf'<sheet name="{PLANNER}"[^>]*r:id="([^"]+)"', book)
    assert rid is not None
    target = re.search(rf'Id="{rid.group(1)}"[^>]*Target="([^"]+)"', rels) or re.search(
        rf'Target="([^"]+)"[^>]*Id="{rid.group(1)}"', rels)
    assert target is not None
    return "xl/" + target.group(1).lstrip("/").removeprefix("xl/")


def _rezip(base: bytes, change: Callable[[str, bytes], bytes | None], drop: str | None = None,
           extra: list[tuple[str, bytes]] | None = None) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(base)) as src, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as dst:
        for info in src.infolist():
            if info.filename == drop:
                continue
            data = src.read(info.filename)
            new = change(info.filename, data)
            dst.writestr(info.filename, data if new is None else new)
        for name, data in extra or ():
            dst.writestr(name, data)
    return out.getvalue()


def _xml_value(base: bytes, cell: str, text: str) -> bytes:
    """The planner sheet with cell ``cell`` holding a numeric cell whose value text is ``text``."""
    base = _edited(base, _set(cell, 12345))  # a numeric cell to rewrite, wherever the cell was
    part = _planner_part(base)

    def change(name: str, data: bytes) -> bytes | None:
        if name != part:
            return None
        pattern = rf'(<c r="{cell}"[^>]*>)<v>12345</v>'.encode()
        return re.sub(pattern, lambda m: m.group(1) + b"<v>" + text.encode() + b"</v>", data)
    return _rezip(base, change)


def formulas(base: bytes) -> Iterator[WorkbookCase]:
    cells = _read_cells(base)
    texts = ["=0", "=1+0", "=1/0", "=A1", "='[other.xlsx]Sheet1'!A1", "=cmd|' /C calc'!A0",
             '=HYPERLINK("http://example.invalid","x")', "=INDIRECT(\"A\"&ROW())", "=" + "(" * 500 + "1" + ")" * 500]
    for role in ("budget", "mode", "training options", "IPU 0 heading", "first layer", "first layer's IPU",
                 "second layer's IPU"):
        for text in texts:
            yield "formulas", f"{role} ({cells[role]}) {text[:30]}", _edited(base, _set(cells[role], text))


def huge_counts(base: bytes) -> Iterator[WorkbookCase]:
    cells = _read_cells(base)
    header = int(cells["Layer heading"][1:])
    ipu_row = int(cells["IPU label"][1:])

    def layers(count: int) -> Callable[[Any], None]:
        def edit(sheet: Any) -> None:
            for k in range(count):
                sheet.cell(row=header + 1 + k, column=1, value=f"layer{k}")
                sheet.cell(row=header + 1 + k, column=2, value=min(k * 2 // max(count, 1), 1))
        return edit

    def ipu_columns(sheet: Any) -> None:
        for k in range(2_000):
            sheet.cell(row=ipu_row, column=2 + k, value=k)

    yield "huge_counts", "10,000 layer rows", _edited(base, layers(10_000))
    yield "huge_counts", "200,000 layer rows", _edited(base, layers(200_000))
    yield "huge_counts", "2,000 IPU columns", _edited(base, ipu_columns)
    yield "huge_counts", "a layer name of 32,767 characters", _edited(base, _set(cells["first layer"], "x" * 32_767))
    big = json.dumps({"recompute": "none", "pad": "x" * 1_000_000})
    yield "huge_counts", "a 1 MB training option", _edited(base, _set(cells["training options"], big))
    yield "huge_counts", "a cell at row 1,048,576 and column XFD", _edited(base, _set("XFD1048576", 1))


def deep_nesting(base: bytes) -> Iterator[WorkbookCase]:
    cells = _read_cells(base)
    for depth in (1_000, 100_000):
        # A cell holds at most 32,767 characters in a spreadsheet program; popliner's reader takes what is there.
        text = "[" * depth + "]" * depth
        yield "deep_nesting", f"training options [ x{depth}", _xml_string(base, cells["training options"], text)
        text = '{"a":' * depth + "1" + "}" * depth
        yield "deep_nesting", f"training options {{ x{depth}", _xml_string(base, cells["training options"], text)
    part = _planner_part(base)
    for depth in (1_000, 100_000):
        nested = b"<x>" * depth + b"</x>" * depth

        def in_sheet(name: str, data: bytes, nested: bytes = nested) -> bytes | None:
            return data.replace(b"<sheetData>", b"<sheetData>" + nested, 1) if name == part else None

        def in_strings(name: str, data: bytes, nested: bytes = nested) -> bytes | None:
            return data.replace(b"<si>", b"<si>" + nested, 1) if name == "xl/sharedStrings.xml" else None

        yield "deep_nesting", f"XML elements x{depth} in the planner sheet", _rezip(base, in_sheet)
        yield "deep_nesting", f"XML elements x{depth} in the shared strings", _rezip(base, in_strings)


def _xml_string(base: bytes, cell: str, text: str) -> bytes:
    """Cell ``cell`` as an inline string of any length (openpyxl refuses more than 32,767 characters)."""
    base = _edited(base, _set(cell, 12345))
    part = _planner_part(base)
    escaped = text.replace("&", "&amp;").replace("<", "&lt;").encode()

    def change(name: str, data: bytes) -> bytes | None:
        if name != part:
            return None
        pattern = rf'<c r="{cell}"([^>]*?)(?: t="n")?>\s*<v>12345</v>\s*</c>'.encode()
        return re.sub(pattern, lambda m: b'<c r="' + cell.encode() + b'" t="inlineStr"><is><t>' + escaped
                      + b"</t></is></c>", data)
    return _rezip(base, change)


DTD = b'<?xml version="1.0"?>\n<!DOCTYPE x [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;">]>\n'


def xml_structure(base: bytes) -> Iterator[WorkbookCase]:
    with zipfile.ZipFile(io.BytesIO(base)) as z:
        names = z.namelist()
    for name in names:
        yield "xml_structure", f"{name} removed", _rezip(base, lambda n, d: None, drop=name)
        for how, new in (("empty", lambda d: b""), ("no XML", lambda d: b"\x00\xffnot xml<<<"),
                         ("UTF-16", lambda d: d.decode("utf-8").encode("utf-16")),
                         ("cut in half", lambda d: d[: len(d) // 2]),
                         ("with a DTD", lambda d: DTD + re.sub(rb"^<\?xml[^>]*\?>\s*", b"", d))):
            def change(n: str, d: bytes, name: str = name, new: Callable[[bytes], bytes] = new) -> bytes | None:
                return new(d) if n == name else None
            yield "xml_structure", f"{name} {how}", _rezip(base, change)

    def renamed(n: str, d: bytes) -> bytes | None:
        return d.replace(f'name="{PLANNER}"'.encode(), b'name="Planner"') if n == "xl/workbook.xml" else None

    def twice(n: str, d: bytes) -> bytes | None:
        return d.replace(b'name="Operations"', f'name="{PLANNER}"'.encode()) if n == "xl/workbook.xml" else None

    yield "xml_structure", "planner sheet renamed", _rezip(base, renamed)
    yield "xml_structure", "two sheets named Split planner", _rezip(base, twice)
    for fraction in (0.1, 0.5, 0.9, 0.999):
        yield "xml_structure", f"zip cut at {fraction:.1%}", base[: int(len(base) * fraction)]
    yield "xml_structure", "the bytes of a CSV", b"Layer,IPU\n0,0\n1,1\n"


def workbook_cases(base: bytes, n: int, rng: random.Random) -> list[WorkbookCase]:
    """About ``n`` cases (every kind); ``wrong_type`` fills what the others leave, with 120 cases at least."""
    out: list[WorkbookCase] = []
    for items in (cell_missing(base), number_bounds(base), formulas(base), huge_counts(base), deep_nesting(base),
                  xml_structure(base)):
        out.extend(items)
    out.extend(wrong_type(base, rng, max(n - len(out), 120)))
    return out
