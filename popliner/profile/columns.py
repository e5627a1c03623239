"""A fast reader for the bulky columns of a compact profile document.

Most of a profile's bytes are a handful of long lists: the ``variables``
columns (ids, sizes, tiles, classes and names, one entry per lowered
variable) and the ``vars`` list of each program. Parsed as JSON they become
tens of millions of Python objects, which costs most of a cold load's time
and memory. :func:`extract_columns` finds those lists in the raw text, reads
them straight into numpy arrays and hands back the rest of the document, with
the lists replaced by small placeholders, for the ordinary JSON parser.

It is only a shortcut for well-formed documents (plain non-negative
integers, names without escapes, the same separator between every two names:
what JSON writers produce, compact, spaced or indented): anything else makes
it return None, and the loader parses the whole document the
ordinary way, with the ordinary checks and messages. The loader also checks
that every placeholder sits exactly where the list was expected
(``Extracted.VARIABLES_PLACEHOLDER`` at ``variables``, the program list
numbers in order at ``programs[i].vars``) and falls back otherwise, so the
result is the same as the ordinary path's whenever it is used.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from concurrent.futures import Executor, Future
from dataclasses import dataclass
from typing import Any

import numpy as np

from popliner.profile.jsontext import JSON_SPACE, skip_space
from popliner.profile.model import NameTable, recompute_tensors
from popliner.profile.namelist import Text, names_end, parse_names
from popliner.profile.rules import INT64_MAX

__all__ = ["Extracted", "extract_columns", "parse_uint_list"]

_INT32_MAX = 2**31 - 1
#: Columns the Profile holds as int32: read that way, they take half the memory while the text is still there.
_NARROW_COLUMNS = ("tile", "class")
_INT_COLUMNS = ("id", "bytes", "tile", "class")
_VARIABLES_KEY = b'"variables"'
_VARS_KEY = b'"vars"'
#: Bytes of text read at once by the integer list reader (see _parse_span).
PIECE_BYTES = 1 << 23


@dataclass
class Extracted:
    """The lists taken out of the document."""

    VARIABLES_PLACEHOLDER = {"__popliner_columns__": 1}

    #: id, bytes -> int64; tile, class -> int32 when every value fits (the Profile's types), else int64.
    columns: dict[str, np.ndarray]
    #: The names, packed (compressed) already: read straight from the document, never copied raw;
    #: None when the variables have no names.
    names: NameTable | None
    #: Variable ids of every extracted program list, back to back, and each list's length (empty: none found).
    program_vars: np.ndarray
    program_var_lens: np.ndarray
    #: :func:`recompute_tensors` of the names, found before they were packed (None with no names).
    recompute: np.ndarray | None = None
    #: The names being packed on the caller's thread pool (``names`` is then still their view of the text).
    packing: Future[NameTable] | None = None

    def wait_for_names(self) -> None:
        """Take the packed names once they are ready (the text they were a view of can then go)."""
        if self.packing is not None:
            self.names, self.packing = self.packing.result(), None


def extract_columns(text: bytes | bytearray, pool: Executor | None = None, *,
                    piece: int = PIECE_BYTES) -> tuple[bytes, Extracted] | None:
    """``(rest of the document, extracted lists)``, or None to parse it the ordinary way.

    With a ``pool``, the names are packed on it while this thread reads the
    rest (zlib lets go of the GIL); the caller then calls
    :meth:`Extracted.wait_for_names`. ``piece``: bytes of text read at once (lists are read
    in pieces, names scanned in pieces); the answer is the same for any.
    """
    # The first "variables" object is taken; if it is not the top-level one, the loader finds
    # the top-level key without its placeholder and parses the ordinary way.
    at, brace = _find_key(text, _VARIABLES_KEY, 0x7B, 0, len(text))
    if at < 0:
        return None
    found = _variables_object(text, brace, piece)
    if found is None:
        return None
    var_end, columns, names = found
    table, recompute, packing = _take_names(names, pool)
    del names
    spans: list[tuple[int, int, bytes]] = [(brace, var_end, b'{"__popliner_columns__":1}')]
    bodies: list[tuple[int, int]] = []  # where each list's items are in the text
    # The variables object is skipped: its names are most of the document, and a
    # "vars" key inside it (in a name) would be refused below anyway as overlapping.
    for lo, hi in ((0, at), (var_end, len(text))):
        if not _program_lists(text, lo, hi, bodies, spans):
            return None
    # No list found is zero lists, not "not read": the programs then have no variables (or the
    # loader finds a list the reader did not take and parses the ordinary way).
    program_lens = np.array([text.count(b",", a, b) + 1 if b > a else 0 for a, b in bodies], np.int64)
    program_vars = _fill(np.empty(int(program_lens.sum()), np.int64), _joined(text, bodies, piece))
    if program_vars is None:
        return None
    del bodies
    rest = _rest(text, spans)
    if rest is None:
        return None
    return rest, Extracted(columns, table, program_vars, program_lens, recompute, packing)


def _take_names(names: tuple[np.ndarray, np.ndarray, int, int] | None, pool: Executor | None) -> tuple[
        NameTable | None, np.ndarray | None, Future[NameTable] | None]:
    """The names as a table (packed, or being packed on ``pool``) and their recompute flags."""
    if names is None:
        return None, None, None
    # The names are a view of the text: flag the recompute tensors while they are plain,
    # then compress them (the cache stores them that way too), so that the text can go.
    table = NameTable(*names)
    recompute = recompute_tensors(table)
    if pool is not None:
        return table, recompute, pool.submit(table.packed)
    return table.packed(), recompute, None


def _rest(text: Text, spans: list[tuple[int, int, bytes]]) -> bytes | None:
    """The text with each span ``(start, end, placeholder)`` replaced by its placeholder; None if two overlap."""
    spans.sort()
    pieces: list[Text] = []
    prev = 0
    for a, b, repl in spans:
        if a < prev:
            return None  # overlapping: a "vars" key inside the variables object
        pieces += (text[prev:a], repl)
        prev = b
    pieces.append(text[prev:])
    return b"".join(pieces)


def _find_key(text: Text, key: bytes, opener: int, lo: int, hi: int) -> tuple[int, int]:
    """The first ``key`` between ``lo`` and ``hi`` followed by ``:`` and ``opener``: (its index, the opener's), or -1s.

    A ``key`` followed by anything else is a string value of that spelling, not the key, and is passed over.
    """
    pos = text.find(key, lo, hi)
    while pos >= 0:
        at = _value_at(text, pos + len(key))
        if at < hi and text[at] == opener:
            return pos, at
        pos = text.find(key, pos + 1, hi)
    return -1, -1


def _value_at(text: Text, i: int) -> int:
    """Index of the value after a key that ends at ``i`` (whitespace, ``:``, whitespace), or ``len(text)``."""
    i = skip_space(text, i)
    return skip_space(text, i + 1) if text[i : i + 1] == b":" else len(text)


def _program_lists(text: Text, lo: int, hi: int, bodies: list[tuple[int, int]],
                   spans: list[tuple[int, int, bytes]]) -> bool:
    """Find every ``"vars":[...]`` list between ``lo`` and ``hi``: its items' span and placeholder. False: give up."""
    pos, bracket = _find_key(text, _VARS_KEY, 0x5B, lo, hi)
    while pos >= 0:
        if text[pos - 1] == 0x5C:  # a backslash: the quote is escaped, this is inside a string
            return False
        start = bracket + 1
        end = text.find(b"]", start)
        if end < 0 or end >= hi:
            return False
        # A list of whitespace only is empty: no items, so no comma count of one.
        empty = end > start and text[start:end].isspace() and not text[start:end].translate(None, JSON_SPACE)
        bodies.append((start, start if empty else end))
        spans.append((bracket, end + 1, b"%d" % (len(bodies) - 1)))
        pos, bracket = _find_key(text, _VARS_KEY, 0x5B, end, hi)
    return True


def _variables_object(text: Text, pos: int, piece: int) -> tuple[int, dict[str, np.ndarray], tuple[
        np.ndarray, np.ndarray, int, int] | None] | None:
    """Read the ``{"id":[..],...}`` object at ``pos``: (end, int columns, names)."""
    columns: dict[str, np.ndarray] = {}
    names = None
    i = skip_space(text, pos + 1)
    if text[i : i + 1] == b"}":
        return None  # no columns: the ordinary path reports what is missing
    while True:
        key, j = _column_key(text, i)
        if key is None or key in columns or (key == "name" and names is not None):
            return None
        found = _column(text, key, j, piece)
        if found is None:
            return None
        end, value = found
        if isinstance(value, tuple):
            names = value
        else:
            columns[key] = value
        i = skip_space(text, end + 1)
        nxt = text[i : i + 1]
        if nxt == b",":
            i = skip_space(text, i + 1)
        elif nxt == b"}" and len(columns) == len(_INT_COLUMNS):
            return i + 1, columns, names
        else:
            return None


def _column_key(text: Text, i: int) -> tuple[str | None, int]:
    """The column's key at ``i`` (one popliner reads here, or None) and the index of its ``[``."""
    if text[i : i + 1] != b'"':
        return None, i
    key_end = text.find(b'"', i + 1, i + 16)
    if key_end < 0:
        return None, i
    key = bytes(text[i + 1 : key_end]).decode("ascii", "replace")
    j = _value_at(text, key_end + 1)
    if key not in (*_INT_COLUMNS, "name") or text[j : j + 1] != b"[":
        return None, i
    return key, j


def _column(text: Text, key: str, j: int,
            piece: int) -> tuple[int, np.ndarray | tuple[np.ndarray, np.ndarray, int, int]] | None:
    """The list at ``j`` (its ``[``): (index of its ``]``, the integers or the names), or None."""
    if key == "name":
        end = names_end(text, j)
        names = None if end is None else parse_names(text, j, end + 1, scan=piece)
        return None if end is None or names is None else (end, names)
    end = text.find(b"]", j)
    col = None if end < 0 else _parse_span(text, j + 1, end, np.int32 if key in _NARROW_COLUMNS else np.int64, piece)
    return None if col is None else (end, col)


def _parse_span(text: Text, start: int, end: int, dtype: type[np.integer[Any]] = np.int64,
                piece: int = PIECE_BYTES) -> np.ndarray | None:
    """``parse_uint_list(text[start:end])``, read in pieces cut at commas, straight into one array.

    A piece's copy and numbers are the same size every time, so the
    allocator hands the same memory back; a whole column's copy would be
    fresh memory, a page fault every 4 KiB. With ``dtype`` int32 the array
    is int32 unless a value does not fit (then int64, values unchanged).
    """
    if end - start <= piece:
        col = parse_uint_list(text[start:end])
        if col is None or dtype is np.int64 or (len(col) and int(col.max()) > _INT32_MAX):
            return col
        return col.astype(dtype)
    return _fill(np.empty(text.count(b",", start, end) + 1, dtype), _cut_at_commas(text, start, end, piece))


def _cut_at_commas(text: Text, start: int, end: int, piece: int) -> Iterator[Text]:
    """``text[start:end]`` in pieces of about ``piece`` bytes, each cut just before a comma (dropped)."""
    pos = start
    while True:
        stop = end if end - pos <= piece else text.rfind(b",", pos, pos + piece)
        if stop < pos:
            stop = end  # no comma in a whole piece: the rest at once (it cannot be a valid list anyway)
        yield text[pos:stop]
        if stop >= end:
            return
        pos = stop + 1


def _joined(text: Text, bodies: list[tuple[int, int]], piece: int) -> Iterator[bytes]:
    """The non-empty list bodies at ``bodies``, joined with commas, in pieces of about ``piece`` bytes."""
    view = memoryview(text)  # joined straight from the text, not copied one by one first
    group: list[memoryview] = []
    size = 0
    for a, b in bodies:
        if b > a:
            group.append(view[a:b])
            size += b - a + 1
            if size >= piece:
                yield b",".join(group)
                group, size = [], 0
    if group:
        yield b",".join(group)
    group.clear()
    view.release()


def _fill(out: np.ndarray, pieces: Iterable[Text]) -> np.ndarray | None:
    """``out`` filled with the integers of the list bodies ``pieces`` (see :func:`parse_uint_list`), or None.

    None as well when they hold more or fewer integers than ``out``: an empty
    item (a doubled, leading or trailing comma) leaves it short.
    """
    at = 0
    for piece in pieces:
        part = parse_uint_list(piece)
        if part is None or at + len(part) > len(out):
            return None
        if out.dtype != part.dtype and len(part) and int(part.max()) > _INT32_MAX:
            out = out.astype(np.int64)  # too big for int32: kept whole, for the builder to word its refusal
        out[at : at + len(part)] = part
        at += len(part)
    return out if at == len(out) else None


def parse_uint_list(body: bytes | bytearray) -> np.ndarray | None:
    """The integers of a JSON list body (``1,22,333`` or ``1, 22,\n 333``, no brackets) as int64, or None.

    Only non-negative integers without leading zeros that fit in int64,
    separated by single commas and JSON whitespace, are read here.
    """
    if type(body) is not bytes:
        body = bytes(body)  # numpy reads numbers from bytes only (the text may be a bytearray: see gunzip)
    space = body.translate(None, b"0123456789,")
    if space.translate(None, JSON_SPACE):
        return None  # anything but digits, commas and whitespace
    if len(space) == len(body):
        return np.zeros(0, np.int64)  # nothing but whitespace, or nothing
    # With the count known, numpy allocates the array once instead of growing it as it reads
    # (each growth a realloc and fresh pages: a tenth of a large cold load).
    count = body.count(b",") + 1
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fewer items than commas: refused below
            out: np.ndarray = np.fromstring(body, dtype=np.int64, count=count, sep=",")
    except ValueError:  # numpy 2.x refuses data it cannot read to the end (",,")
        return None
    # fromstring saturates on overflow: a maximal value may be a clipped one.
    if len(out) != count or int(out.max()) == INT64_MAX:
        return None
    # Every number read takes at least as many digits as its plain form, and a
    # separator at least one comma; equality with the body's length (less its
    # whitespace) leaves no room for a leading zero, an empty item (",,", read
    # as a 0 that has no digit) or an unread tail.
    if _plain_length(out) + len(space) != len(body):
        return None
    return out


def _plain_length(values: np.ndarray) -> int:
    """Length of ``values`` written as a compact list body: digits of each plus the commas."""
    total = 2 * len(values) - 1  # one digit each, and the commas
    top = int(values.max())
    power = 10
    while power <= top:
        total += int(np.count_nonzero(values >= power))
        power *= 10
    return total
