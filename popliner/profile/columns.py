"""A fast reader for the bulky columns of a compact profile document.

Most of a profile's bytes are a handful of long lists: the ``variables``
columns (ids, sizes, tiles, classes and names, one entry per lowered
variable) and the ``vars`` list of each program. Parsed as JSON they become
tens of millions of Python objects, which costs most of a cold load's time
and memory. :func:`extract_columns` finds those lists in the raw text, reads
them straight into numpy arrays and hands back the rest of the document, with
the lists replaced by small placeholders, for the ordinary JSON parser.

It is only a shortcut for well-formed compact documents (no whitespace in
those lists, plain non-negative integers, names without escapes): anything
else makes it return None, and the loader parses the whole document the
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

import numpy as np

from popliner.profile.model import NameTable, recompute_tensors

#: The document's text: bytes, or the bytearray the gunzip filled (no copy made of it).
Text = bytes | bytearray

__all__ = ["Extracted", "extract_columns", "parse_uint_list"]

_INT64_MAX = 2**63 - 1
_INT_COLUMNS = ("id", "bytes", "tile", "class")
_VARIABLES_KEY = b'"variables":{'
_VARS_KEY = b'"vars":['
#: Pieces scanned at once, to bound the temporaries of the byte checks.
_SCAN = 1 << 24
#: Bytes of text read at once by the integer list reader (see _parse_span).
_PIECE_BYTES = 1 << 23


@dataclass
class Extracted:
    """The lists taken out of the document."""

    VARIABLES_PLACEHOLDER = {"__popliner_columns__": 1}

    columns: dict[str, np.ndarray]  # id, bytes, tile, class -> int64
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


def extract_columns(text: bytes | bytearray, pool: Executor | None = None) -> tuple[bytes, Extracted] | None:
    """``(rest of the document, extracted lists)``, or None to parse it the ordinary way.

    With a ``pool``, the names are packed on it while this thread reads the
    rest (zlib lets go of the GIL); the caller then calls
    :meth:`Extracted.wait_for_names`.
    """
    # The first "variables" object is taken; if it is not the top-level one, the loader finds
    # the top-level key without its placeholder and parses the ordinary way.
    at = text.find(_VARIABLES_KEY)
    if at < 0:
        return None
    found = _variables_object(text, at + len(_VARIABLES_KEY) - 1)
    if found is None:
        return None
    var_end, columns, names = found
    table = recompute = packing = None
    if names is not None:
        # The names are a view of the text: flag the recompute tensors while they are plain,
        # then compress them (the cache stores them that way too), so that the text can go.
        table = NameTable(*names)
        recompute = recompute_tensors(table)
        if pool is not None:
            packing = pool.submit(table.packed)
        else:
            table = table.packed()
    del names
    spans: list[tuple[int, int, bytes]] = [(at + len(_VARIABLES_KEY) - 1, var_end, b'{"__popliner_columns__":1}')]
    bodies: list[tuple[int, int]] = []  # where each list's items are in the text
    # The variables object is skipped: its names are most of the document, and a
    # "vars" key inside it (in a name) would be refused below anyway as overlapping.
    for lo, hi in ((0, at), (var_end, len(text))):
        if not _program_lists(text, lo, hi, bodies, spans):
            return None
    # No list found is zero lists, not "not read": the programs then have no variables (or the
    # loader finds a list the reader did not take and parses the ordinary way).
    program_lens = np.array([text.count(b",", a, b) + 1 if b > a else 0 for a, b in bodies], np.int64)
    program_vars = _fill(np.empty(int(program_lens.sum()), np.int64), _joined(text, bodies))
    if program_vars is None:
        return None
    del bodies
    spans.sort()
    pieces: list[Text] = []
    prev = 0
    for a, b, repl in spans:
        if a < prev:
            return None  # overlapping: a "vars" key inside the variables object
        pieces += (text[prev:a], repl)
        prev = b
    pieces.append(text[prev:])
    return b"".join(pieces), Extracted(columns, table, program_vars, program_lens, recompute, packing)


def _program_lists(text: Text, lo: int, hi: int, bodies: list[tuple[int, int]],
                   spans: list[tuple[int, int, bytes]]) -> bool:
    """Find every ``"vars":[...]`` list between ``lo`` and ``hi``: its items' span and placeholder. False: give up."""
    pos = text.find(_VARS_KEY, lo, hi)
    while pos >= 0:
        if text[pos - 1] == 0x5C:  # a backslash: the quote is escaped, this is inside a string
            return False
        start = pos + len(_VARS_KEY)
        end = text.find(b"]", start)
        if end < 0 or end >= hi:
            return False
        bodies.append((start, end))
        spans.append((start - 1, end + 1, b"%d" % (len(bodies) - 1)))
        pos = text.find(_VARS_KEY, end, hi)
    return True


def _variables_object(text: Text, pos: int) -> tuple[int, dict[str, np.ndarray], tuple[
        np.ndarray, np.ndarray, int, int] | None] | None:
    """Read the compact ``{"id":[..],...}`` object at ``pos``: (end, int columns, names)."""
    columns: dict[str, np.ndarray] = {}
    names = None
    seen: set[bytes] = set()
    i = pos + 1
    if text[i : i + 1] == b"}":
        return None  # no columns: the ordinary path reports what is missing
    while True:
        if text[i : i + 1] != b'"':
            return None
        key_end = text.find(b'":[', i + 1, i + 16)
        if key_end < 0:
            return None
        key = bytes(text[i + 1 : key_end])
        if key in seen or key.decode("ascii", "replace") not in (*_INT_COLUMNS, "name"):
            return None
        seen.add(key)
        j = key_end + 2  # the "["
        if key == b"name":
            end = _names_end(text, j)
            if end is None:
                return None
            names = _parse_names(text, j, end + 1)
            if names is None:
                return None
        else:
            end = text.find(b"]", j)
            if end < 0:
                return None
            col = _parse_span(text, j + 1, end)
            if col is None:
                return None
            columns[key.decode()] = col
        i = end + 1
        nxt = text[i : i + 1]
        if nxt == b",":
            i += 1
        elif nxt == b"}":
            if len(columns) != len(_INT_COLUMNS):
                return None
            return i + 1, columns, names
        else:
            return None


def _parse_span(text: Text, start: int, end: int) -> np.ndarray | None:
    """``parse_uint_list(text[start:end])``, read in pieces cut at commas, straight into one array.

    A piece's copy and numbers are the same size every time, so the
    allocator hands the same memory back; a whole column's copy would be
    fresh memory, a page fault every 4 KiB.
    """
    if end - start <= _PIECE_BYTES:
        return parse_uint_list(text[start:end])
    return _fill(np.empty(text.count(b",", start, end) + 1, np.int64), _cut_at_commas(text, start, end))


def _cut_at_commas(text: Text, start: int, end: int) -> Iterator[Text]:
    """``text[start:end]`` in pieces of about :data:`_PIECE_BYTES`, each cut just before a comma (dropped)."""
    pos = start
    while True:
        stop = end if end - pos <= _PIECE_BYTES else text.rfind(b",", pos, pos + _PIECE_BYTES)
        if stop < pos:
            stop = end  # no comma in a whole piece: the rest at once (it cannot be a valid list anyway)
        yield text[pos:stop]
        if stop >= end:
            return
        pos = stop + 1


def _joined(text: Text, bodies: list[tuple[int, int]]) -> Iterator[bytes]:
    """The non-empty list bodies at ``bodies``, joined with commas, in pieces of about :data:`_PIECE_BYTES`."""
    view = memoryview(text)  # joined straight from the text, not copied one by one first
    group: list[memoryview] = []
    size = 0
    for a, b in bodies:
        if b > a:
            group.append(view[a:b])
            size += b - a + 1
            if size >= _PIECE_BYTES:
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
        out[at : at + len(part)] = part
        at += len(part)
    return out if at == len(out) else None


def parse_uint_list(body: bytes | bytearray) -> np.ndarray | None:
    """The integers of a compact JSON list body (``1,22,333``, no brackets) as int64, or None.

    Only non-negative integers without leading zeros that fit in int64,
    separated by single commas, are read here.
    """
    if not body:
        return np.zeros(0, np.int64)
    if type(body) is not bytes:
        body = bytes(body)  # numpy reads numbers from bytes only (the text may be a bytearray: see gunzip)
    if body.translate(None, b"0123456789,"):
        return None  # anything but digits and commas
    if body[:1] == b"," or body[-1:] == b",":
        return None
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
    if not len(out) or int(out.max()) == _INT64_MAX:
        return None
    # Every number read takes at least as many digits as its plain form, and a
    # separator at least one comma; equality with the body's length leaves no
    # room for a leading zero, an empty item (",,") or an unread tail.
    if _plain_length(out) != len(body):
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


def _names_end(text: Text, j: int) -> int | None:
    """Index of the ``]`` closing the list of strings that starts at ``j``."""
    if text[j + 1 : j + 2] == b"]":
        return j + 1
    # A "]" right after a quote; looking for "]" alone is several times faster than for '"]'.
    # A name holding '"]' itself is caught by the structure check of _parse_names.
    end = text.find(b"]", j)
    for _ in range(64):
        if end < 0 or text[end - 1] == 0x22:
            return None if end < 0 else end
        end = text.find(b"]", end + 1)
    end = text.find(b'"]', end)  # many brackets inside names: search for the pair
    return None if end < 0 else end + 1


def _parse_names(text: Text, start: int, end: int) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """``["a","bc",...]`` between ``start`` and ``end`` as (blob, ptr, lead, pad), or None.

    Only names with no escapes and no control characters are read here; the
    blob is a view of the text between the brackets, quotes and commas left
    in (name i starts ``lead + i*pad`` bytes after its offset in ``ptr``), so
    the names are not copied.
    """
    if end - start == 2:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64), 0, 0
    if text.find(b"\\", start, end) >= 0:
        return None
    blob = np.frombuffer(text, np.uint8, end - start - 2, start + 1)
    n = len(blob)
    # One scratch buffer for every piece: fresh temporaries this size cost page faults each time.
    flags = np.empty(min(n, _SCAN), bool)
    if not _printable(blob, flags):
        if any(bool(np.less(blob[lo : lo + _SCAN], 0x20, out=flags[: min(_SCAN, n - lo)]).any())
               for lo in range(0, n, _SCAN)):
            return None  # a raw control character is not JSON
        try:
            text[start + 1 : end - 1].decode("utf-8")
        except UnicodeDecodeError:
            return None
    ptr = _name_offsets(blob, flags)
    if ptr is None:
        return None
    # name i: from opens[i] + 1 = ptr[i] + 3*i + 1 (each earlier name adds its quotes and comma).
    return blob, ptr, 1, 3


def _name_offsets(blob: np.ndarray, flags: np.ndarray) -> np.ndarray | None:
    """Offsets of the names in ``"a","bc",...`` (``blob``, no escapes) as if packed end to end, or None.

    The quotes alternate opening and closing; each opening quote must sit two
    bytes after the previous closing one with a comma between, the first at
    0 and the last closing at the end. Name i then opens at ``ptr[i] + 3*i``,
    so the offsets come straight from the opening quotes. Read piece by
    piece, with the previous quote carried over: only the result is as long
    as the names (the temporaries of whole-column quote positions cost more
    in page faults than the scan itself).
    """
    n = len(blob)
    quotes = 0
    for lo in range(0, n, _SCAN):
        k = min(_SCAN, n - lo)
        quotes += int(np.count_nonzero(np.equal(blob[lo : lo + k], 0x22, out=flags[:k])))
    if quotes % 2 or not quotes:
        return None
    count = quotes // 2
    ptr = np.empty(count + 1, np.int64)
    seen = 0  # quotes before this piece; the even ones (counting from 0) open a name
    last = -2  # the previous quote: the first one must open at 0
    for lo in range(0, n, _SCAN):
        k = min(_SCAN, n - lo)
        q = np.flatnonzero(np.equal(blob[lo : lo + k], 0x22, out=flags[:k]))
        if not len(q):
            continue
        q += lo
        gaps = np.empty_like(q)
        gaps[0] = q[0] - last
        np.subtract(q[1:], q[:-1], out=gaps[1:])
        first_open = seen % 2  # index in q of the first opening quote
        if np.any(gaps[first_open::2] != 2):
            return None
        after_close = q[1 - first_open :: 2] + 1
        if len(after_close) and after_close[-1] == n:
            after_close = after_close[:-1]  # the last name's closing quote ends the list
        if np.any(blob[after_close] != 0x2C):
            return None
        opens = q[first_open::2]
        name = (seen + first_open) // 2
        np.subtract(opens, np.arange(3 * name, 3 * (name + len(opens)), 3, dtype=np.int64),
                    out=ptr[name : name + len(opens)])
        seen += len(q)
        last = int(q[-1])
    if last != n - 1:
        return None
    ptr[count] = n - 3 * count + 1
    return ptr


def _printable(blob: np.ndarray, flags: np.ndarray) -> bool:
    """Every byte is printable ASCII (0x20 to 0x7E), checked piece by piece (``flags``: scratch space)."""
    shifted = np.empty(len(flags), np.uint8)
    for lo in range(0, len(blob), _SCAN):
        piece = blob[lo : lo + _SCAN]
        k = len(piece)
        np.subtract(piece, 0x20, out=shifted[:k])  # below 0x20 wraps round to the top
        if bool(np.greater_equal(shifted[:k], 0x5F, out=flags[:k]).any()):
            return False
    return True
