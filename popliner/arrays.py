"""Small numpy building blocks shared by the loader, the memory model and the solvers.

Sorting-based and mask-based set operations here replace ``np.unique``, whose
hash-based path in numpy 2 is several times slower on the millions of
int64 keys a full-size profile produces.
"""

from __future__ import annotations

import hashlib
import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["content_key", "csr_span", "digest_array", "expand_ranges", "flagged_entries", "gather_csr",
           "huge_page_setter", "overwrite_slices", "rank_by_table", "row_slices", "sorted_unique", "span_at",
           "union_of", "unique_inverse", "widen_span"]


def digest_array(digest: Any, part: np.ndarray) -> None:
    """Feed ``digest`` an array's type and length, then its values: no two sequences of parts feed the same."""
    digest.update(np.dtype(part.dtype).str.encode() + len(part).to_bytes(8, "little"))
    digest.update(np.ascontiguousarray(part).view(np.uint8).data)


def content_key(prefix: bytes, *parts: np.ndarray | bytes) -> bytes:
    """A memo key: ``prefix``, then a SHA-256 digest of ``parts`` (arrays by type, length and values; bytes as given).

    Equal parts give equal keys; the key keeps no copy of the values (a per-variable flag column of a large
    profile is tens of MB, and a memo held several such keys).
    """
    digest = hashlib.sha256()
    for part in parts:
        if isinstance(part, bytes):
            digest.update(b"bytes" + len(part).to_bytes(8, "little") + part)
        else:
            digest_array(digest, np.asarray(part).reshape(-1))
    return prefix + digest.digest()


def expand_ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Concatenation of ``arange(s, s + c)`` for every (start, count) pair."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    starts = np.asarray(starts, np.int64)
    if not counts.all():  # an empty range adds nothing (and would share its place with the next)
        keep = counts > 0
        starts, counts = starts[keep], counts[keep]
    # One running sum: each value is the one before plus one, but a range's first jumps to its start. (np.repeat of
    # each range's offset was ten times as slow for a layer's private variables: some 3,000 runs of 50.)
    out = np.ones(total, np.int64)
    out[0] = starts[0]
    out[np.cumsum(counts[:-1])] = starts[1:] - starts[:-1] - counts[:-1] + 1
    return np.cumsum(out, out=out)


def gather_csr(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray | Sequence[int]) -> np.ndarray:
    """Entries of the given rows of a CSR table, row after row (duplicates kept)."""
    rows = np.asarray(rows, dtype=np.int64)
    if rows.size == 0:
        return np.zeros(0, idx.dtype)
    if int(rows[-1]) - int(rows[0]) == rows.size - 1 and (rows.size == 1 or bool((np.diff(rows) == 1).all())):
        # Consecutive rows (every operation, a layer's block): their entries are one slice, no index expansion.
        return np.array(idx[ptr[rows[0]]:ptr[rows[-1] + 1]])
    out: np.ndarray = idx[expand_ranges(ptr[rows], ptr[rows + 1] - ptr[rows])]
    return out


def csr_span(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray, values: np.ndarray, size: int,
             dtype: type[np.signedinteger], lo_none: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """Per entry value in ``[0, size)``: the smallest and largest ``values[row]`` over the ``rows`` of a CSR table
    that hold it, in ``dtype`` (when none does: ``lo_none`` and -1).

    Plain scatters (:func:`overwrite_slices`), the rows in order of value (a
    larger one overwrites the largest) and back (a smaller one overwrites the
    smallest): every value a scatter writes is the same, so repeated entries
    cannot matter. No copy of the table's entries (tens of millions at 120
    BERT-Large layers).
    """
    lo = np.full(size, lo_none, dtype)
    hi = np.full(size, -1, dtype)
    rows = np.asarray(rows, np.int64)
    order = rows[np.argsort(values[rows], kind="stable")]
    slices = row_slices(ptr, order, values[order])
    overwrite_slices(hi, idx, slices)
    overwrite_slices(lo, idx, slices[::-1])
    return lo, hi


def row_slices(ptr: np.ndarray, rows: np.ndarray, values: np.ndarray) -> list[tuple[int, int, int]]:
    """The entries of a CSR table's ``rows`` with their ``values`` as (start, stop, value) slices of its entries,
    in the rows' order: consecutive rows of one value (a layer's operations are a block) are one slice."""
    if rows.size == 0:
        return []
    cut = np.flatnonzero((np.diff(rows) != 1) | (values[1:] != values[:-1])) + 1
    first, last = np.concatenate(([0], cut)), np.concatenate((cut, [rows.size])) - 1
    return list(zip(ptr[rows[first]].tolist(), ptr[rows[last] + 1].tolist(), values[first].tolist()))


def overwrite_slices(target: np.ndarray, idx: np.ndarray, slices: Sequence[tuple[int, int, int]]) -> None:
    """``target[idx[start:stop]] = value`` for each slice in turn (:func:`row_slices`): a later one overwrites.

    Scattered in pieces through one index buffer of the platform's index
    type, which stays in the cache: an index of another type (the tables'
    int32) is converted to a new array at every scatter, which took half the time.
    """
    buffer = np.empty(_PIECE, np.intp)
    for start, stop, value in slices:
        for at in range(start, stop, _PIECE):
            into = buffer[:min(stop - at, _PIECE)]
            into[...] = idx[at:at + into.size]
            target[into] = value


#: Entries per scatter of :func:`overwrite_slices`.
_PIECE = 1 << 13


def flagged_entries(flags: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``np.flatnonzero(flags[idx])``: the positions of the entries whose value is flagged, in order (int64).

    Gathered in pieces through one index buffer of the platform's index type, and the flagged ones of each piece
    found while it is in the cache: no whole column of flags over the entries (40 M at 120 BERT-Large layers), and
    no gather through the tables' int32 index, which numpy converts in small buffers (0.28 -> 0.20 s a pass there,
    medians of 9).
    """
    found = []
    buffer = np.empty(min(_GATHER_PIECE, idx.size), np.intp)
    got = np.empty(buffer.size, bool)
    for at in range(0, idx.size, _GATHER_PIECE):
        size = min(idx.size - at, _GATHER_PIECE)
        into, out = buffer[:size], got[:size]
        into[...] = idx[at:at + size]
        np.take(flags, into, out=out)
        found.append(np.flatnonzero(out) + at)
    return np.concatenate(found) if found else np.zeros(0, np.int64)


#: Entries per gather of :func:`flagged_entries`.
_GATHER_PIECE = 1 << 16


def span_at(ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray, values: np.ndarray, at: np.ndarray, size: int,
            dtype: type[np.signedinteger], lo_none: int = -1) -> tuple[np.ndarray, np.ndarray]:
    """:func:`csr_span` at the entry values ``at`` only (sorted, distinct, in ``[0, size)``): their smallest and
    largest ``values[row]`` over the ``rows`` that hold them, in ``at``'s order.

    For a few values among millions: one pass over the table's entries to find theirs, no scatter per row.
    """
    wanted = np.zeros(size, bool)
    wanted[at] = True
    taken = np.zeros(len(ptr) - 1, bool)
    taken[rows] = True
    entry = np.flatnonzero(wanted[idx])
    row = np.searchsorted(ptr, entry, side="right") - 1  # each entry's row (empty rows end where the next starts)
    entry, row = entry[taken[row]], row[taken[row]]
    where = np.searchsorted(at, idx[entry])
    lo, hi = np.full(at.size, lo_none, dtype), np.full(at.size, -1, dtype)
    np.minimum.at(lo, where, values[row].astype(dtype))
    np.maximum.at(hi, where, values[row].astype(dtype))
    return lo, hi


def widen_span(span: tuple[np.ndarray, np.ndarray], ptr: np.ndarray, idx: np.ndarray, rows: np.ndarray,
               values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`csr_span`'s ``span`` (its ``lo_none`` above every value) with more ``rows`` of the table taken in:
    copies (``span`` itself when there are none). For a few rows: each a minimum and a maximum over its entries,
    gathered before they are written (so a repeated entry writes the same value)."""
    if rows.size == 0:
        return span
    lo, hi = span[0].copy(), span[1].copy()
    for row, value in zip(rows.tolist(), values[rows].tolist()):
        at = idx[ptr[row]:ptr[row + 1]]
        lo[at], hi[at] = np.minimum(lo[at], value), np.maximum(hi[at], value)
    return lo, hi


def union_of(indices: np.ndarray, size: int) -> np.ndarray:
    """Sorted distinct values of ``indices``, all in ``[0, size)``: a mask, not a sort."""
    mask = np.zeros(size, bool)
    mask[indices] = True
    return np.flatnonzero(mask)


def sorted_unique(keys: np.ndarray, nearly_sorted: bool = False) -> np.ndarray:
    """Sorted distinct values.

    ``nearly_sorted``: the keys are mostly in order already (long sorted
    runs), where the merge sort is several times faster than the default.
    """
    if keys.size == 0:
        empty: np.ndarray = keys.copy()
        return empty
    s = np.sort(keys, kind="stable" if nearly_sorted else None)
    keep = np.empty(len(s), bool)
    keep[0] = True
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    if keep.all():
        return s  # no repeats: spare a copy of millions of keys
    unique: np.ndarray = s[keep]
    return unique


def rank_by_table(values: np.ndarray, max_span: int = 1 << 24) -> tuple[np.ndarray, np.ndarray] | None:
    """Sorted distinct values and each value's rank among them (int64), through a table over their range.

    No sort: one boolean per value in ``min..max``. None when that range
    spans ``max_span`` values or more (then sort, e.g. :func:`unique_inverse`).
    """
    if values.size == 0:
        return values.astype(np.int64), np.zeros(0, np.int64)
    lo, hi = int(values.min()), int(values.max())
    if hi - lo >= max_span:
        return None
    at = values - values.dtype.type(lo) if lo else values  # in the values' own type: no int64 copy of a long column
    seen = np.zeros(hi - lo + 1, bool)
    seen[at] = True
    present = np.flatnonzero(seen)
    # Each present value's rank written at its place only: a table far wider than the values it holds (a pair of
    # ranks, whatif._unique_rows) is neither summed nor filled, only the places the values read are touched.
    rank = np.empty(seen.size, np.int64)
    rank[present] = np.arange(present.size)
    # np.take: a plain gather, about twice as fast as an index of a long column.
    return present + lo, np.take(rank, at)


def unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted distinct values and, for each key, the position of its value."""
    if keys.size == 0:
        return keys.copy(), np.zeros(0, np.int64)
    order = np.argsort(keys, kind="stable")
    s = keys[order]
    new = np.empty(len(s), bool)
    new[0] = True
    np.not_equal(s[1:], s[:-1], out=new[1:])
    group = np.cumsum(new) - 1
    inverse = np.empty(len(keys), np.int64)
    inverse[order] = group
    return s[new], inverse


def huge_page_setter() -> Callable[[bool], bool] | None:
    """numpy's switch for its huge-page advice (private, in ``numpy._core`` or, before 2.0, ``numpy.core``).

    It sets the advice and returns the previous setting; None where this numpy has no such switch.
    """
    for name in ("numpy._core.multiarray", "numpy.core.multiarray"):
        try:
            module = importlib.import_module(name)
        except ImportError:  # pragma: no cover - depends on the numpy version
            continue
        found: Callable[[bool], bool] | None = getattr(module, "_set_madvise_hugepage", None)
        return found
    return None  # pragma: no cover
