"""The column reader's list of variable names, read straight from the text without a Python string per name.

A list of strings written by a JSON writer has the same separator between
every two items: ``,`` (compact), ``, `` (``json.dumps``'s default) or
``,\\n`` and the indentation (``indent=N``). Given that, name i starts a
fixed number of bytes per item after its offset among the names packed end
to end, so the names are left where they are (a view of the text) and only
their offsets are computed. Any other layout, an escape or a raw control
character in a name makes the reader return None, and the loader parses the
document the ordinary way.
"""

from __future__ import annotations

import re

import numpy as np

from popliner.profile.jsontext import JSON_SPACE, skip_space

__all__ = ["names_end", "parse_names"]

#: The document's text: bytes, or the bytearray the gunzip filled (no copy made of it).
Text = bytes | bytearray
#: Bytes scanned at once, to bound the temporaries of the byte checks.
SCAN = 1 << 24
#: A closing quote, whitespace and the bracket that ends a list of strings.
_LAST_NAME = re.compile(rb'"[ \t\n\r]*\]')
_SPACE_SET = frozenset(JSON_SPACE)


def names_end(text: Text, j: int) -> int | None:
    """Index of the ``]`` closing the list of strings that starts at ``j`` (its ``[``)."""
    first = skip_space(text, j + 1)
    if text[first : first + 1] == b"]":
        return first
    # A "]" after a quote (and whitespace); looking for "]" alone is several times faster.
    # A name holding '"]' itself is caught by the structure check of parse_names.
    end = text.find(b"]", j)
    for _ in range(64):
        if end < 0 or _last_before(text, end) == 0x22:
            return None if end < 0 else end
        end = text.find(b"]", end + 1)
    found = _LAST_NAME.search(text, end)  # many brackets inside names: search for the pair
    return None if found is None else found.end() - 1


def _last_before(text: Text, i: int) -> int:
    """The last byte before ``i`` that is not whitespace (-1 if none)."""
    i -= 1
    while i >= 0 and text[i] in _SPACE_SET:
        i -= 1
    return text[i] if i >= 0 else -1


def parse_names(text: Text, start: int, end: int, *,
                scan: int = SCAN) -> tuple[np.ndarray, np.ndarray, int, int] | None:
    """``["a","bc",...]`` from ``start`` (``[``) to ``end`` (after ``]``) as (blob, ptr, lead, pad), or None.

    The blob is a view of the text from the first name's opening quote to
    the last one's closing quote, separators left in (name i starts
    ``lead + i*pad`` bytes after its offset in ``ptr``), so the names are
    not copied.
    """
    lo = skip_space(text, start + 1)
    hi = end - 1
    while hi > lo and text[hi - 1] in _SPACE_SET:
        hi -= 1
    if lo >= hi:
        return np.zeros(0, np.uint8), np.zeros(1, np.int64), 0, 0
    if text.find(b"\\", lo, hi) >= 0:
        return None
    sep = _separator(text, lo, hi)
    if sep is None:
        return None
    blob = np.frombuffer(text, np.uint8, hi - lo, lo)
    # One scratch buffer for every piece: fresh temporaries this size cost page faults each time.
    flags = np.empty(max(min(len(blob), scan), 1), bool)  # its length is the piece every scan reads
    ptr = _name_offsets(blob, flags, sep)
    if ptr is None:
        return None
    if not _plain_text(text, lo, hi, blob, flags, sep, len(ptr) - 1):
        return None
    # name i: from opens[i] + 1 = ptr[i] + pad*i + 1 (each earlier name adds its quotes and the separator).
    return blob, ptr, 1, len(sep) + 2


def _separator(text: Text, lo: int, hi: int) -> bytes | None:
    """The bytes between the first two names (a comma, whitespace around it), ``,`` if there is one name, or None."""
    close = text.find(b'"', lo + 1, hi)
    if close < 0 or close == hi - 1:
        return b","
    after = text.find(b'"', close + 1, hi)
    sep = bytes(text[close + 1 : after]) if after > 0 else b""
    if sep.strip(JSON_SPACE) != b",":
        return None
    return sep


def _name_offsets(blob: np.ndarray, flags: np.ndarray, sep: bytes) -> np.ndarray | None:
    """Offsets of the names in ``"a"<sep>"bc"<sep>...`` (``blob``, no escapes) as if packed end to end, or None.

    The quotes alternate opening and closing; each opening quote must sit
    ``len(sep) + 1`` bytes after the previous closing one with ``sep``
    between, the first at 0 and the last closing at the end. Name i then
    opens at ``ptr[i] + pad*i``, so the offsets come straight from the
    opening quotes. Read piece by piece, with the previous quote carried
    over: only the result is as long as the names (the temporaries of
    whole-column quote positions cost more in page faults than the scan
    itself).
    """
    n, step = len(blob), len(flags)
    quotes = 0
    for lo in range(0, n, step):
        k = min(step, n - lo)
        quotes += int(np.count_nonzero(np.equal(blob[lo : lo + k], 0x22, out=flags[:k])))
    if quotes % 2 or not quotes:
        return None
    count = quotes // 2
    gap, pad = len(sep) + 1, len(sep) + 2
    ptr = np.empty(count + 1, np.int64)
    seen = 0  # quotes before this piece; the even ones (counting from 0) open a name
    last = -gap  # the previous quote: the first one must open at 0
    for lo in range(0, n, step):
        k = min(step, n - lo)
        q = np.flatnonzero(np.equal(blob[lo : lo + k], 0x22, out=flags[:k]))
        if not len(q):
            continue
        q += lo
        if not _quotes_in_place(blob, q, last, seen % 2, sep):
            return None
        opens = q[seen % 2 :: 2]
        name = (seen + seen % 2) // 2
        np.subtract(opens, np.arange(pad * name, pad * (name + len(opens)), pad, dtype=np.int64),
                    out=ptr[name : name + len(opens)])
        seen += len(q)
        last = int(q[-1])
    if last != n - 1:
        return None
    ptr[count] = n - pad * count + pad - 2
    return ptr


def _quotes_in_place(blob: np.ndarray, q: np.ndarray, last: int, first_open: int, sep: bytes) -> bool:
    """Each opening quote of ``q`` (from index ``first_open``) follows the previous closing one by the separator."""
    gaps = np.empty_like(q)
    gaps[0] = q[0] - last
    np.subtract(q[1:], q[:-1], out=gaps[1:])
    if np.any(gaps[first_open::2] != len(sep) + 1):
        return False
    after_close = q[1 - first_open :: 2] + 1
    if len(after_close) and after_close[-1] == len(blob):
        after_close = after_close[:-1]  # the last name's closing quote ends the list
    return not any(np.any(blob[after_close + k] != byte) for k, byte in enumerate(sep))


def _plain_text(text: Text, lo: int, hi: int, blob: np.ndarray, flags: np.ndarray, sep: bytes, count: int) -> bool:
    """The names are UTF-8 with no raw control character (the separators' newlines and tabs aside)."""
    controls = high = 0
    for at in range(0, len(blob), len(flags)):
        piece = blob[at : at + len(flags)]
        k = len(piece)
        controls += int(np.count_nonzero(np.less(piece, 0x20, out=flags[:k])))
        high += int(np.count_nonzero(np.greater_equal(piece, 0x80, out=flags[:k])))
    # Every separator was checked byte for byte: any other control byte is inside a name (not JSON).
    if controls != (count - 1) * sum(b < 0x20 for b in sep):
        return False
    if not high:
        return True  # ASCII is UTF-8
    try:
        text[lo:hi].decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
