"""Hostile review workbooks, made by rewriting the zip members of a real one.

Each takes a workbook popliner wrote (so the planner sheet is genuine) and
changes one thing: a huge extra sheet, a huge shared-strings part, a DTD with
entities in one XML part.
"""

from __future__ import annotations

import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

#: A row without cell references (optional in the format): the same bytes every time, so it compresses ~1000:1.
_ROW = b'<row><c t="n"><v>1</v></c><c t="n"><v>2</v></c></row>'


def rewrite(source: Path, target: Path, change: Callable[[str, bytes], bytes | None],
            extra: dict[str, Callable[[zipfile.ZipFile, str], None]] | None = None) -> Path:
    """Copy ``source`` to ``target`` passing every member through ``change`` (None keeps it as is)."""
    with zipfile.ZipFile(source) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED,
                                                         compresslevel=9) as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            new = change(info.filename, data)
            dst.writestr(info.filename, data if new is None else new)
        for name, write in (extra or {}).items():
            write(dst, name)
    return target


def _stream(dst: zipfile.ZipFile, name: str, pieces: Iterator[bytes]) -> None:
    info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_DEFLATED
    with dst.open(info, "w", force_zip64=True) as out:
        for piece in pieces:
            out.write(piece)


def with_huge_sheet(source: Path, target: Path, rows: int) -> Path:
    """An extra worksheet ``Bomb`` of ``rows`` rows (two numbers each), listed first in the workbook."""

    def change(name: str, data: bytes) -> bytes | None:
        text = data.decode("utf-8")
        if name == "[Content_Types].xml":
            return text.replace(
                "</Types>", '<Override PartName="/xl/worksheets/sheet99.xml" ContentType="application/'
                "vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml\"/></Types>").encode()
        if name == "xl/_rels/workbook.xml.rels":
            return text.replace(
                "</Relationships>", '<Relationship Id="rIdBomb" Type="http://schemas.openxmlformats.org/'
                'officeDocument/2006/relationships/worksheet" Target="worksheets/sheet99.xml"/>'
                "</Relationships>").encode()
        if name == "xl/workbook.xml":
            return re.sub("<sheets>", '<sheets><sheet name="Bomb" sheetId="99" r:id="rIdBomb"/>', text).encode()
        return None

    def rows_of() -> Iterator[bytes]:
        yield (b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<worksheet xmlns="http://schemas.'
               b'openxmlformats.org/spreadsheetml/2006/main"><sheetData>')
        batch = 10_000
        for start in range(1, rows + 1, batch):
            yield _ROW * (min(start + batch, rows + 1) - start)
        yield b"</sheetData></worksheet>"

    return rewrite(source, target, change, {"xl/worksheets/sheet99.xml": lambda d, n: _stream(d, n, rows_of())})


def with_huge_shared_strings(source: Path, target: Path, count: int, length: int) -> Path:
    """The shared strings part with ``count`` extra strings of ``length`` characters appended."""

    def change(name: str, data: bytes) -> bytes | None:
        return b"" if name == "xl/sharedStrings.xml" else None

    def strings(original: bytes) -> Iterator[bytes]:
        head, tail = original.rsplit(b"</sst>", 1)
        yield head
        piece = b"<si><t>" + b"x" * length + b"</t></si>"
        for start in range(0, count, 10_000):
            yield piece * min(10_000, count - start)
        yield b"</sst>" + tail

    with zipfile.ZipFile(source) as src:
        original = src.read("xl/sharedStrings.xml")

    def write(dst: zipfile.ZipFile, name: str) -> None:
        _stream(dst, name, strings(original))

    # The emptied member is dropped and written again at the end, in full.
    tmp = target.with_suffix(".tmp.xlsx")
    rewrite(source, tmp, change)
    with zipfile.ZipFile(tmp) as src, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as dst:
        for info in src.infolist():
            if info.filename != "xl/sharedStrings.xml":
                dst.writestr(info.filename, src.read(info.filename))
        write(dst, "xl/sharedStrings.xml")
    tmp.unlink()
    return target


def with_dtd(source: Path, target: Path, member: str = "xl/workbook.xml", *, laughs: bool = False,
             encoding: str = "utf-8") -> Path:
    """``member`` with a DOCTYPE declaring entities (a billion-laughs chain with ``laughs``), used in it."""
    if laughs:
        decl = '<!ENTITY l0 "ha">' + "".join(f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 10))
        use = "&l9;"
    else:
        decl = '<!ENTITY e "Split planner">'
        use = "&e;"

    def change(name: str, data: bytes) -> bytes | None:
        if name != member:
            return None
        text = data.decode("utf-8")
        head, rest = text.split("?>", 1)
        root = re.match(r"\s*<([A-Za-z:]+)", rest)
        assert root is not None
        doctype = f"<!DOCTYPE {root.group(1)} [{decl}]>"
        # The entity is used where text is allowed: in an attribute value of the root's first child.
        body = re.sub(r'(<[A-Za-z:]+ [^>]*?name=")([^"]*)"', lambda m: f'{m.group(1)}{m.group(2)}{use}"', rest,
                      count=1)
        out = head.replace('encoding="UTF-8"', f'encoding="{encoding.upper()}"') + "?>" + doctype + body
        return out.encode(encoding)

    return rewrite(source, target, change)
