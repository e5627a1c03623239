"""The running stash entry of a range that grows one layer at a time (training).

A range table (:mod:`popliner.memory.ranges`) needs, for every range ``i..j``,
one activation stash entry per tile: the figure of
:func:`popliner.memory.stages.stash_entry_per_tile`. Taking it
afresh for each ``j`` would read the range's variables again at every
growth; :class:`StashRow` sums the columns :func:`stash_columns` keeps per
layer instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from popliner.arrays import rank_by_table, unique_inverse
from popliner.memory.liveness.grid import Columns
from popliner.memory.stages import select_stash, stash_windows

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.profile.model import Profile

__all__ = ["StashRow", "class_columns", "pair_groups", "stash_columns"]


def stash_columns(facts: MemoryFacts, var: np.ndarray, with_owner: bool = False,
                  columns: Columns | None = None) -> dict[str, np.ndarray] | None:
    """What a stash entry reads of each variable that is not always live (training only).

    ``columns``: the variables' classes, tiles and bytes in the facts' profile, when the caller has them.
    """
    if not facts.training:
        return None
    return class_columns(facts.profile, facts.stash_candidate, facts.class_steps, var, with_owner, columns)


def class_columns(profile: Profile, candidate: np.ndarray | None, steps: tuple[np.ndarray, np.ndarray],
                  var: np.ndarray, with_owner: bool = False, columns: Columns | None = None) -> dict[str, np.ndarray]:
    """:func:`stash_columns` of ``var`` in ``profile``: ``candidate`` marks the variables a stash entry may hold
    (None: all of ``var`` may), ``steps`` are each liveness class's first and last live step
    (:func:`popliner.memory.liveness.class_steps`).

    ``with_owner``: one row per candidate, with its position in ``var`` (``owner``).
    """
    v = profile.variables
    flags = None if candidate is None else np.take(candidate, var)
    if not with_owner:
        # Summed per class from the variables' columns (those the grid's change reads too, when given).
        given = Columns(v.klass[var], v.tile[var], v.bytes[var]) if columns is None else columns
        grouped = _grouped_by_class(given, flags, steps, profile.tiles)
        if grouped is not None:
            return grouped
    keep = np.arange(len(var)) if flags is None else np.flatnonzero(flags)  # the others never are
    sv = var if flags is None else var[keep]
    # One row per candidate, the steps through the classes (no step columns over every variable).
    klass = v.klass[sv]
    cols = {"first": steps[0][klass], "last": steps[1][klass], "tile": v.tile[sv], "nbytes": v.bytes[sv]}
    if with_owner:
        cols["owner"] = keep
        return cols
    return _grouped(cols, profile.tiles)


def _grouped_by_class(columns: Columns, candidate: np.ndarray | None, class_steps: tuple[np.ndarray, np.ndarray],
                      tiles: int) -> dict[str, np.ndarray] | None:
    """:func:`_grouped` of the variables of ``columns`` flagged in ``candidate`` (None: every one), with their
    (first, last) pairs and bytes found per liveness class (:meth:`Columns.class_bytes`).

    A variable's first and last live steps are its class's, so the pairs of
    the few hundred classes present give every candidate's pair, and the
    classes' rows of bytes add up to the pairs': no columns of steps over
    all the variables, and no second scatter of them. The same rows as
    :func:`_grouped`; None where it would not group them (or groups by a
    sort): the caller then takes the columns.
    """
    ranked = columns.ranked() if columns.tile.size and tiles else None
    if ranked is None:
        return None
    count, rows, flagged = columns.class_bytes(tiles, candidate)
    if flagged is not None:
        count, rows = flagged
    present = count > 0
    candidates = int(count.sum())
    if not candidates:
        return None
    classes, rows = ranked[0][present], rows[present]
    first, last = (steps[classes].astype(np.int64) for steps in class_steps)
    if first.min() < -1 or last.min() < -1 or max(first.max(), last.max()) >= 2**31:
        return None
    pairs = pair_groups(first + 1, last + 1)
    if pairs is None or pairs[0].size * tiles > 4 * candidates:
        return None
    # Each pair's row: the sum of its classes' rows (integer-valued float64 below 2**53: exact in any order). A row
    # add per class (a hundred or so): np.add.reduceat over the sorted rows took several times as long.
    summed = np.zeros((pairs[0].size, tiles))
    out = list(summed)  # views: no view made per add
    for row, pair in zip(rows, pairs[2].tolist()):
        out[pair] += row
    return {"first": pairs[0] - 1, "last": pairs[1] - 1, "dense": _exact_rows(summed)}


def _grouped(cols: dict[str, np.ndarray], tiles: int) -> dict[str, np.ndarray]:
    """Stash columns summed per (first step, last step) and tile, when that is denser than one row per variable.

    A layer's variables come as tensors spread over the tiles, so they share
    a hundred or so (first, last) pairs: one row of bytes per tile for each
    pair (``dense``) is then all a stash entry needs of them, and which pairs
    join it is a handful of comparisons.
    """
    first, last = cols["first"].astype(np.int64), cols["last"].astype(np.int64)
    if first.size == 0 or first.min() < -1 or last.min() < -1 or max(first.max(), last.max()) >= 2**31:
        return cols
    pairs = pair_groups(first + 1, last + 1)
    if pairs is None:
        # Steps are -1 (never live) or below 2**31: one int64 key per pair.
        keys, group = unique_inverse(((first + 1) << 32) | (last + 1))
        pair_first, pair_last = (keys >> 32) - 1, (keys & 0xFFFFFFFF) - 1
    else:
        pair_first, pair_last, group = pairs[0] - 1, pairs[1] - 1, pairs[2]
    if pair_first.size * tiles > 4 * first.size:
        return cols
    dense = _pair_bytes(group, cols["tile"], cols["nbytes"], pair_first.size, tiles)
    return {"first": pair_first, "last": pair_last, "dense": dense}


def _pair_bytes(group: np.ndarray, tile: np.ndarray, nbytes: np.ndarray, pairs: int, tiles: int) -> np.ndarray:
    """The bytes of each (pair, tile) (:func:`_exact_rows`)."""
    # float64 bincount: exact while a tile's bytes in one group are below 2**53.
    return _exact_rows(np.bincount(group * tiles + tile, weights=nbytes, minlength=pairs * tiles).reshape(-1, tiles))


def _exact_rows(rows: np.ndarray) -> np.ndarray:
    """Integer-valued float64 rows of bytes per tile as integers: int32 when every sum fits (else int64).

    The rows are kept per layer for every range that holds it (hundreds of MB at 120 BERT-Large layers in
    int64); a sum of them (:meth:`StashRow.entry`) accumulates in int64 either way, so the figures are the same.
    """
    dense = rows.astype(np.int64)
    if dense.size and 0 <= int(dense.min()) and int(dense.max()) < 2**31:
        dense = dense.astype(np.int32)
    return dense


def pair_groups(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Distinct (a, b) pairs in lexicographic order and each row's pair, by tables rather than a sort.

    ``a`` and ``b`` are non-negative int64 (steps). Each column's values are
    ranked through a table over its range, and the pairs of ranks through a
    table over their product, so the order is that of a sort on ``(a, b)``.
    None when the tables would be large (then sort).
    """
    a_hi, b_hi = int(a.max()), int(b.max())
    if max(a_hi, b_hi) >= 1 << 22:
        return None
    ranked_a, ranked_b = rank_by_table(a), rank_by_table(b)
    assert ranked_a is not None and ranked_b is not None  # both spans are under 2**22
    (a_vals, a_rank), (b_vals, b_rank) = ranked_a, ranked_b
    if a_vals.size * b_vals.size > 1 << 22:
        return None
    pair = a_rank * b_vals.size + b_rank
    seen = np.zeros(a_vals.size * b_vals.size, bool)
    seen[pair] = True
    present = np.flatnonzero(seen)
    rank = np.cumsum(seen) - 1
    return a_vals[present // b_vals.size], b_vals[present % b_vals.size], rank[pair]



class StashRow:
    """One stash entry per tile of a set growing one layer at a time.

    Each entry is the masked sum over the candidates of the set so far (the
    columns :func:`stash_columns` keeps per layer), as
    :func:`popliner.memory.stages.stash_entry_per_tile` takes it. The set's
    windows move a little at each growth, so most candidates keep their
    place in or out of the entry: the last entry is kept with which
    candidates (or (first, last) pairs) it held, and the next adds those that
    joined and takes those that left (integer bytes, summed in int64 or in
    float64 below 2**53: the same figure as a sum afresh, to the byte). One
    selection over every candidate of the set, not one per layer's chunk.
    """

    def __init__(self, facts: MemoryFacts, row_ops: list[np.ndarray]) -> None:
        self.facts = facts
        self.tiles = facts.tiles
        self.row_ops = row_ops
        self.chunks: list[dict[str, np.ndarray]] = []  # every candidate so far
        # The operations of the growths so far, end to end, and where each growth's end there.
        self._ops = _Growing(np.int64)
        self._ops_ends: list[int] = []
        # Each chunk's first and last steps, end to end (as far as the last entry took them), where each chunk's
        # start there, which the last entry held, and that entry.
        self._first = _Growing(np.int64)
        self._last = _Growing(np.int64)
        self._starts: list[int] = []
        self._held = np.zeros(0, bool)
        self._entry = np.zeros(self.tiles, np.int64)

    def add(self, cols: dict[str, np.ndarray]) -> None:
        self.chunks.append(cols)

    def entry(self, at: int) -> np.ndarray:
        """The entry after ``at + 1`` growths."""
        windows = stash_windows(self.facts, self._ops_upto(at))
        if windows is None:
            return np.zeros(self.tiles, np.int64)
        self._take_new()
        held = select_stash(self.facts, self._first.array, self._last.array, windows)
        old = len(self._held)
        # The new candidates were held by no entry yet.
        moved = np.concatenate((np.flatnonzero(held[:old] != self._held), old + np.flatnonzero(held[old:])))
        if moved.size:
            # The chunk of each moved candidate, chunk by chunk (``moved`` is sorted).
            chunk_of = np.searchsorted(self._starts, moved, side="right") - 1
            cut = np.flatnonzero(np.diff(chunk_of)) + 1
            for k, part in zip(chunk_of[np.concatenate(([0], cut))].tolist(), np.split(moved, cut), strict=True):
                self._entry += self._change(self.chunks[k], part - self._starts[k], held[part])
        self._held = held
        return self._entry.copy()

    def _ops_upto(self, at: int) -> np.ndarray:
        """The operations of the first ``at + 1`` growths."""
        for ops in self.row_ops[len(self._ops_ends): at + 1]:
            self._ops.extend((ops,))
            self._ops_ends.append(len(self._ops.array))
        return self._ops.array[: self._ops_ends[at]]

    def _take_new(self) -> None:
        """Put the chunks added since the last entry end to end with the others."""
        new = self.chunks[len(self._starts):]
        size = len(self._first.array)
        for c in new:
            self._starts.append(size)
            size += len(c["first"])
        self._first.extend([c["first"] for c in new])
        self._last.extend([c["last"] for c in new])

    def _change(self, cols: dict[str, np.ndarray], rows: np.ndarray, joins: np.ndarray) -> np.ndarray:
        """Bytes per tile that ``rows`` of a chunk add to the entry (``joins``) or take from it (the others)."""
        if "dense" in cols:
            dense = cols["dense"]
            change = np.asarray(dense[rows[joins]].sum(axis=0, dtype=np.int64))
            change -= dense[rows[~joins]].sum(axis=0, dtype=np.int64)
            return change
        # float64 bincount as in the facts: exact while a tile's entry is below 2**53 bytes.
        nbytes = cols["nbytes"][rows].astype(np.float64)
        return np.bincount(cols["tile"][rows], weights=np.where(joins, nbytes, -nbytes),
                           minlength=self.tiles).astype(np.int64)


class _Growing:
    """A 1-D array grown at its end: its storage doubles when full, so a growth copies only what it adds."""

    def __init__(self, dtype: type[np.signedinteger]) -> None:
        self._buffer = np.zeros(0, dtype)
        self._size = 0

    @property
    def array(self) -> np.ndarray:
        return self._buffer[: self._size]

    def extend(self, parts: list[np.ndarray] | tuple[np.ndarray, ...]) -> None:
        size = self._size + sum(len(p) for p in parts)
        if size > len(self._buffer):
            buffer = np.empty(max(size, 2 * len(self._buffer)), self._buffer.dtype)
            buffer[: self._size] = self._buffer[: self._size]
            self._buffer = buffer
        for p in parts:
            self._buffer[self._size: self._size + len(p)] = p
            self._size += len(p)
