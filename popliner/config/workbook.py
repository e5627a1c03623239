"""One sheet of an .xlsx workbook, read lazily and defensively.

A workbook is a zip of XML parts, and a small file can unpack into
gigabytes (a huge sheet that compresses 1000:1, a million long shared
strings) or carry a DTD whose entities expand. ``popliner check`` and
``config-from`` need one sheet. The guards (read-only mode, the size limit on
the declared sizes before parsing and again on the bytes as they unpack, a
DTD refused before any parser sees it) are docs/bad-inputs.md's 'Review
workbooks'; the declared sizes bound the parse because the zip reader never
yields more than a part's declared size. :class:`_GuardedZip` does the
counting and the DTD check, and the sheet's rows are parsed only as far down
as they are asked for.

Every refusal is a :class:`~popliner.errors.ConfigError` (exit 2) naming the
file and the part.
"""

from __future__ import annotations

import io
import os
import zipfile
from typing import IO, Any
from xml.etree.ElementTree import ParseError

from popliner.errors import ConfigError
from popliner.profile.limits import LIMITS, limit

__all__ = ["DEFAULT_MAX_WORKBOOK_BYTES", "IPU_COL", "LAYER_COL", "PLANNER_SHEET", "TRAINING_COL", "SheetCells",
           "open_sheet"]

# Where the review workbook's Split planner sheet keeps what `check` and `config-from` read back. The
# writer (popliner.writers.planner) lays the sheet out around these; the reader (config/planner.py) finds them.
PLANNER_SHEET = "Split planner"
#: Columns of its layer table: the layer's name, and the IPU a user types.
LAYER_COL = 1
IPU_COL = 2
#: The column of the training options (JSON), on the mode row.
TRAINING_COL = 7

#: Bytes the parts popliner reads may unpack to. A review workbook of a large model reads a few MB
#: (its shared strings and the planner sheet); the other sheets are not read and do not count. At the
#: limit, two million short shared strings take openpyxl 15-20 s and 250 MB.
_LIMIT_VARIABLE = "POPLINER_MAX_WORKBOOK_BYTES"
DEFAULT_MAX_WORKBOOK_BYTES = LIMITS[_LIMIT_VARIABLE]

#: What starts a DTD or an entity declaration, in the encodings an XML parser accepts without a
#: declaration to tell it otherwise (UTF-8 and the ASCII-compatible ones, UTF-16 either way round).
_DTD_MARKS = tuple(mark.encode(codec) for mark in ("<!DOCTYPE", "<!ENTITY")
                   for codec in ("ascii", "utf-16-le", "utf-16-be"))


_EMPTY_SHEET = b'<worksheet xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"/>'


def _is_worksheet(part: str) -> bool:
    """Where every spreadsheet program puts its worksheets (a sheet elsewhere is simply read in full)."""
    lower = part.lower()
    return lower.startswith("xl/worksheets/") and lower.endswith(".xml")


class _GuardedZip(zipfile.ZipFile):
    """A zip whose parts are checked (bytes unpacked against a budget, no DTD) before any parser sees them."""

    def __init__(self, path: str, limit: int) -> None:
        super().__init__(path, "r")
        self.shown = path
        self.limit = limit
        self.spent = 0
        #: While openpyxl loads the book: worksheets open as an empty sheet (see :meth:`open`).
        self.stub_worksheets = False
        self._check_declared()

    def _check_declared(self) -> None:
        """Before anything is parsed: the parts openpyxl parses in full must fit in the budget as declared.

        Worksheets are left out (only the one asked for is read, and only as far as needed); the
        zip reader never yields more than a part's declared size, and :meth:`spend` counts what it yields.
        """
        parsed = [info for info in self.infolist() if info.filename.lower().endswith((".xml", ".rels"))
                  and not _is_worksheet(info.filename)]
        total = sum(info.file_size for info in parsed)
        if total > self.limit:
            largest = max(parsed, key=lambda info: info.file_size)
            raise self._too_big(largest.filename, total)

    def _too_big(self, part: str, size: int) -> ConfigError:
        return ConfigError(
            f"{self.shown}: its parts popliner reads unpack to {size:,} bytes or more (part {part}), over the "
            f"{self.limit:,}-byte limit; a review workbook holds far less. If it is genuine, raise {_LIMIT_VARIABLE}")

    def spend(self, part: str, size: int) -> None:
        self.spent += size
        if self.spent > self.limit:
            raise self._too_big(part, self.spent)

    def open(self, name: str | zipfile.ZipInfo, mode: str = "r",
             pwd: bytes | None = None, *, force_zip64: bool = False) -> IO[bytes]:
        if mode != "r":
            raise ValueError("read only")
        info = name if isinstance(name, zipfile.ZipInfo) else self.getinfo(name)
        if self.stub_worksheets and _is_worksheet(info.filename):
            # openpyxl peeks into every sheet at load for its size, parsing a sheet without a <dimension>
            # to its end; the sizes are not needed, and the one sheet read is opened again afterwards.
            return io.BytesIO(_EMPTY_SHEET)
        return io.BufferedReader(_CheckedPart(self, super().open(info, "r", pwd), info.filename))


class _CheckedPart(io.RawIOBase):
    """A part's bytes as they unpack: counted against the budget and searched for a DTD before they are passed on.

    A DTD comes before the root element, so an XML parser fed through here is refused before it could use one.
    """

    #: Bytes kept from one read to the next, so that a mark split between two reads is still found.
    _KEEP = max(len(mark) for mark in _DTD_MARKS) - 1

    def __init__(self, owner: _GuardedZip, raw: IO[bytes], part: str) -> None:
        super().__init__()
        self._owner = owner
        self._raw = raw
        self._part = part
        self._tail = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._raw.read(len(buffer))
        self._owner.spend(self._part, len(data))
        window = self._tail + data
        if any(mark in window for mark in _DTD_MARKS):
            raise ConfigError(f"{self._owner.shown}: part {self._part} declares a DTD or entities "
                              "(<!DOCTYPE/<!ENTITY), which popliner does not read; save the workbook again from a "
                              "spreadsheet program, or write it anew with `popliner PROFILE -o review.xlsx`")
        self._tail = window[-self._KEEP:]
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            self._raw.close()
        super().close()


#: What a broken or hostile workbook raises inside openpyxl (besides our ConfigError).
_UNREADABLE = (zipfile.BadZipFile, zipfile.LargeZipFile, KeyError, ValueError, TypeError, IndexError,
               AttributeError, OSError, ParseError, EOFError, NotImplementedError)


class SheetCells:
    """The cell values of one sheet, parsed row by row only as far as :meth:`value` asks."""

    def __init__(self, source: str, book: Any, sheet: Any, max_column: int, narrow: tuple[int, int]) -> None:
        self._source = source
        self._book = book
        self._rows: list[tuple[Any, ...]] = []
        self._iter = sheet.iter_rows(min_row=1, max_col=max_column, values_only=True)
        self._max_column = max_column
        # (rows, columns): past the first ``rows`` rows only ``columns`` columns are kept.
        self._narrow = narrow
        self._done = False

    def value(self, row: int, column: int) -> Any:
        """The value at (``row``, ``column``), both from 1; None beyond the sheet or past ``max_column``."""
        wide, narrow = self._narrow
        if column > (self._max_column if row <= wide else narrow):
            raise ValueError(f"column {column} of row {row} is past the columns read")
        while len(self._rows) < row and not self._done:
            try:
                values = next(self._iter)
                self._rows.append(values if len(self._rows) < wide else values[:narrow])
            except StopIteration:
                self._done = True
            except ConfigError:
                raise
            except _UNREADABLE as exc:
                raise ConfigError(f"{self._source}: its sheet cannot be read ({_short(exc)})") from None
        if row > len(self._rows):
            return None
        values = self._rows[row - 1]
        return values[column - 1] if column <= len(values) else None

    def close(self) -> None:
        self._book.close()


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}"


def open_sheet(source: str, name: str, max_column: int, hint: str, narrow: tuple[int, int]) -> SheetCells:
    """The sheet ``name`` of workbook ``source``; close it when done. ``hint`` ends the no-such-sheet message.

    ``narrow``: (rows, columns), keep only that many columns past that many rows (a long table of a few columns).
    """
    from openpyxl.reader.excel import ExcelReader

    if not os.path.isfile(source):
        raise ConfigError(f"{source}: no such file")
    try:
        guarded = _GuardedZip(source, limit(_LIMIT_VARIABLE))
    except ConfigError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, ValueError) as exc:
        raise ConfigError(f"{source}: not a readable .xlsx workbook ({_short(exc)})") from None
    try:
        # openpyxl's load_workbook, with its zip swapped for the guarded one before anything is read.
        reader = ExcelReader(source, read_only=True, data_only=False, keep_links=False)
        reader.archive.close()
        reader.archive = guarded
        reader.valid_files = guarded.namelist()
        guarded.stub_worksheets = True
        reader.read()
        guarded.stub_worksheets = False
        book = reader.wb
    except ConfigError:
        guarded.close()
        raise
    except Exception as exc:  # noqa: BLE001 - anything openpyxl raises on a broken part is bad input
        guarded.close()
        raise ConfigError(f"{source}: not a readable .xlsx workbook ({_short(exc)})") from None
    if name not in book.sheetnames:
        names = ", ".join(book.sheetnames)
        book.close()
        raise ConfigError(f"{source}: no sheet {name!r} (its sheets: {names}); {hint}")
    return SheetCells(source, book, book[name], max_column, narrow)
