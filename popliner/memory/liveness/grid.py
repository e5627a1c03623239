"""The liveness grid: live bytes per (liveness segment, tile) of a growing set of variables.

The running liveness of the range tables (:mod:`popliner.memory.running`).
Adding variables is a scatter with no sort, and a reading costs the same
whatever the number of variables. (A sorted event list per running set, its
cost growing with the set, was the other path until issue 35: forced at 1x
it took a solve 1.7 to 2 times the CPU seconds; it is the tests' oracle now,
``tests/liveness_oracle.py``.)
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import expand_ranges, rank_by_table, union_of, unique_inverse
from popliner.profile.limits import check_grid_cells
from popliner.profile.model import Profile

__all__ = ["BLOCK", "Columns", "SegmentGrid", "cell_dtype", "segment_ends"]

#: Segments per block (:class:`SegmentGrid`). A reading refreshes the blocks a layer touched (a layer of the
#: synthetic BERT-Large touches about 6 per part) and chains the touched blocks: 32 read a range 15 % faster
#: than 64 at 1x and 4x. Since additions add their rows as slices (:meth:`SegmentGrid.row_change`), the refresh
#: of a touched block's rows is most of a reading: 16 cut the grid's readings by a sixth at 120 BERT-Large
#: layers and at 1x (8 was no faster at 1x: more blocks to chain). Any block gives the same figures.
BLOCK = 16

class Columns:
    """Some variables' liveness classes, tiles and bytes (gathered once, read by several parts of a layer).

    The parts that sum bytes per liveness class (the grid's net change, the
    stash columns) rank the classes and scatter the variables once here
    (:meth:`class_bytes`). A set's ranks as profiled are kept for every
    option set (:meth:`popliner.memory.ranges_shared.SharedParts.profiled`):
    columns taken from them come ranked (:meth:`of_ranks`), their classes
    read only where asked.
    """

    __slots__ = ("_klass", "tile", "nbytes", "_ranked", "_whole")

    def __init__(self, klass: np.ndarray | None, tile: np.ndarray, nbytes: np.ndarray,
                 ranked: tuple[np.ndarray, np.ndarray] | None = None) -> None:
        self._klass, self.tile, self.nbytes = klass, tile, nbytes
        self._ranked: tuple[tuple[np.ndarray, np.ndarray] | None] | None = None if ranked is None else (ranked,)
        self._whole: tuple[np.ndarray, np.ndarray] | None = None

    @classmethod
    def of_ranks(cls, classes: np.ndarray, rank: np.ndarray, tile: np.ndarray, nbytes: np.ndarray) -> Columns:
        """Columns whose classes are ``classes[rank]`` (``classes`` sorted and distinct; some may be no
        variable's)."""
        return cls(None, tile, nbytes, (classes, rank))

    @property
    def klass(self) -> np.ndarray:
        if self._klass is None:
            assert self._ranked is not None and self._ranked[0] is not None  # made of ranks
            classes, rank = self._ranked[0]
            self._klass = np.take(classes, rank)
        return self._klass

    def ranked(self) -> tuple[np.ndarray, np.ndarray] | None:
        """Sorted distinct classes (all the variables', perhaps others) and each variable's rank among them:
        :func:`popliner.arrays.rank_by_table` of the classes unless made of ranks."""
        if self._ranked is None:
            self._ranked = (rank_by_table(self.klass),)
        return self._ranked[0]

    def class_bytes(self, tiles: int, candidate: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
        """(variables, bytes per tile) per class of :meth:`ranked` (not None), and the same of the variables
        flagged in ``candidate`` (bool per variable) when given.

        Bytes in float64, exact while a tile's bytes in one class are below
        2**53. One scatter of the variables gives both (a layer's stash
        columns ask with the candidates first; its grid change then takes the
        whole sums kept from that, once).
        """
        ranked = self.ranked()
        assert ranked is not None  # asked for only when the classes are ranked
        rank = ranked[1].astype(np.int64, copy=False)  # kept ranks are narrow: their keys are not
        k = ranked[0].size
        if candidate is None:
            # Kept: a layer's profiled side gives its stash columns (all candidates) and its grid change the same
            # sums. The columns live only while the layer's parts are made (ranges_shared.VarSet).
            if self._whole is None:
                sums = np.bincount(rank * tiles + self.tile, weights=self.nbytes, minlength=k * tiles)
                self._whole = (np.bincount(rank, minlength=k), sums.reshape(k, tiles))
            return (*self._whole, None)
        key = 2 * rank + candidate  # one key per (class, candidate or not)
        counts = np.bincount(key, minlength=2 * k).reshape(k, 2)
        sums = np.bincount(key * tiles + self.tile, weights=self.nbytes, minlength=2 * k * tiles).reshape(k, 2, tiles)
        # Integer-valued float64 below 2**53: the sum of the two halves is exact.
        self._whole = (counts.sum(axis=1), sums[:, 0] + sums[:, 1])
        return (*self._whole, (counts[:, 1], sums[:, 1]))


class SegmentGrid:
    """Live bytes per (liveness segment, tile) of a growing set of variables, read in blocks of segments.

    The distinct interval starts and ends of the profile's liveness classes,
    ``ends``, cut the steps into segments; live bytes are constant within one.
    ``diff[k, t]`` holds the bytes that go live (+) or die (-) at ``ends[k]``
    on tile ``t``, so a running sum over segments gives the live bytes of
    every segment, and the peak over steps ``lo..hi`` is the largest of the
    segments holding ``lo`` to ``hi``. Adding variables is a scatter, with no
    sort, and the grid's cost does not depend on the number of variables
    (synthetic BERT-Large training has 3,319 distinct interval ends at 1x and
    13,111 at 4x: 4.9 M and 19.3 M cells on 1,472 tiles).

    Segments are grouped in blocks of ``block`` (default :data:`BLOCK`). Each
    block keeps the largest of its running sums (``block_max``) and its net
    change (``block_sum``), refreshed only for the blocks that variables were
    added to since the last reading: a layer's events fall in a few blocks
    (its forward and backward steps), so adding a layer to a range no longer
    costs a pass over the whole grid. A reading chains the blocks' net
    changes (one row per block), takes the blocks inside the window whole and
    sums again the rows of its two end blocks.
    Integer sums in any order: the figures are those of one running sum over
    all segments, to the byte.
    """

    def __init__(self, profile: Profile, ends: np.ndarray, block: int = BLOCK,
                 dtype: type[np.signedinteger] | None = None, buffers: bool = True) -> None:
        self.p = profile
        self.ends = ends
        self.width = len(ends)
        self.tiles = profile.tiles
        self.block = block
        self.nblocks = max(-(-self.width // self.block), 1)
        # Column of each interval's start and end, once per profile.
        self.col_start = np.searchsorted(ends, profile.iv_start)
        self.col_end = np.searchsorted(ends, profile.iv_end)
        self.dtype = dtype if dtype is not None else cell_dtype(profile)
        cells = self.nblocks * self.block * max(self.tiles, 1)
        self.cell_dtype = np.int32 if cells < 2**31 else np.int64
        # ``buffers`` False: a grid whose segments alone are read (events made on it, never added), with empty
        # buffers, as a grid that gave its buffers back (tens to hundreds of MB on a large profile).
        self.diff, self.block_max, self.block_sum = self.zeroed_buffers(self.nblocks if buffers else 0)
        self.stale = np.zeros(self.nblocks, bool)  # events added since the block's sums were taken
        # The block's net change taken since, but not its largest running sum: a reading takes that only of the
        # blocks it takes whole (:meth:`_refresh`).
        self.max_stale = np.zeros(self.nblocks, bool)
        self.touched = np.zeros(self.nblocks, bool)  # events added since the last clear
        self.owner: object | None = None  # the token of the running set whose variables the grid holds
        # Live bytes before each block (the net changes of the blocks before it), kept between readings: valid
        # for the blocks before ``_known``, which a change to a block's sums lowers to that block. A reading
        # extends them only to its window's last block. In the cells' type: each is the live bytes of a subset of
        # the variables on one tile, which the type holds (cell_dtype).
        self._before = np.zeros((self.nblocks + 1, self.tiles), self.dtype)
        self._known = self.nblocks
        # The last reading's end-block rows (:meth:`_rows`) by (block, first row, last row): a range grown by a
        # layer is mostly read in the same window, whose end blocks the layer seldom touches. Dropped once the
        # block changes (:meth:`_refresh`, :meth:`clear`).
        self._end_rows: dict[tuple[int, int, int], np.ndarray] = {}

    def zeroed_buffers(self, rows: int | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """New zeroed buffers (diff, block max, block sum) of ``rows`` blocks (default: the grid's)."""
        rows = self.nblocks if rows is None else rows
        return (np.zeros((rows, self.block, self.tiles), self.dtype), np.zeros((rows, self.tiles), self.dtype),
                np.zeros((rows, self.tiles), self.dtype))

    @classmethod
    def of(cls, profile: Profile, block: int = BLOCK, dtype: type[np.signedinteger] | None = None,
           buffers: bool = True) -> SegmentGrid:
        """``dtype``: :func:`cell_dtype` of the profile when already known. Refused past the grid cells limit."""
        ends = segment_ends(profile)
        check_grid_cells(profile.path, profile.tiles, len(ends))
        return cls(profile, ends, block, dtype, buffers)

    def clear(self) -> None:
        touched = np.flatnonzero(self.touched)
        if touched.size:
            for buffer in (self.diff, self.block_max, self.block_sum):
                buffer[touched] = 0
            self.touched[:] = False
            self.stale[:] = False
            self.max_stale[:] = False
            self._known = min(self._known, int(touched[0]))
            self._end_rows = {}

    def events_of(self, var_idx: np.ndarray, with_owner: bool = False,
                  klass: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Grid cells (segment x tiles + tile) where each variable's intervals start and end, and its bytes.

        ``klass``: every variable's liveness class when not the profile's own
        (those of a profile whose class table this one's extends).
        """
        p = self.p
        v = p.variables
        cls = (v.klass if klass is None else klass)[var_idx]
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        iv = expand_ranges(p.class_ptr[cls], counts)
        owner = np.repeat(np.arange(len(var_idx)), counts)
        tile = v.tile[var_idx].astype(np.int64)[owner]
        events = {"start": (self.col_start[iv] * self.tiles + tile).astype(self.cell_dtype),
                  "end": (self.col_end[iv] * self.tiles + tile).astype(self.cell_dtype),
                  "nbytes": v.bytes[var_idx][owner].astype(self.dtype)}
        if with_owner:
            events["owner"] = owner
        return events

    def merged(self, var_idx: np.ndarray | None, columns: Columns | None = None) -> dict[str, np.ndarray]:
        """The events of the variables as one net change per cell, which :meth:`add` applies without ``add.at``.

        For a layer's private variables, added to every range that holds the
        layer: the merge is done once. When the events fill most cells of the
        segments they touch (a layer's activations are spread over all tiles),
        the change is kept dense, as rows of those segments, and an addition
        is a plain add of rows; else as distinct cells and a plain indexed add
        (exact either way: integer sums in any order). ``columns``: the
        variables' classes, tiles and bytes in this grid's profile, when the
        caller has them already (then ``var_idx`` is not read: it may be None).
        """
        p = self.p
        v = p.variables
        if columns is None:
            assert var_idx is not None  # the variables, when their columns are not given
            columns = Columns(v.klass[var_idx], v.tile[var_idx], v.bytes[var_idx])
        by_class = self._merged_by_class(columns)
        if by_class is not None:
            return by_class
        cls = columns.klass
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        iv = expand_ranges(p.class_ptr[cls], counts)
        tile, nbytes = columns.tile.astype(np.int64), columns.nbytes.astype(np.int64)
        if iv.size != cls.size or not (counts == 1).all():  # else one interval per variable, in order
            owner = np.repeat(np.arange(cls.size), counts)
            tile, nbytes = tile[owner], nbytes[owner]
        return self.net_change(self.col_start[iv], self.col_end[iv], tile, nbytes)

    def _merged_by_class(self, columns: Columns) -> dict[str, np.ndarray] | None:
        """:meth:`merged`'s dense rows, from the variables' bytes summed per (liveness class, tile) first.

        The variables of a class share its intervals, so the bytes per class
        and tile, once summed (:meth:`Columns.class_bytes`), go live and
        die at the class's interval ends: a few hundred rows to add instead
        of an event per variable interval. The same cells as the events
        scattered (float64 sums of integer bytes, exact below 2**53). None
        when the change is not kept dense (it weighs the segments against
        the number of events, as :meth:`net_change` does; then that makes
        the distinct cells from the events) or the classes span too many
        numbers.
        """
        tiles = self.tiles
        ranked = columns.ranked() if tiles else None
        if ranked is None:
            return None
        count, whole, _ = columns.class_bytes(tiles)
        classes = ranked[0]
        if classes.size and not count.all():  # ranks kept for a larger set: the classes no variable here has go
            present = count > 0
            classes, count, whole = classes[present], count[present], whole[present]
        lo, hi = self.p.class_ptr[classes], self.p.class_ptr[classes + 1]
        intervals = hi - lo
        iv = expand_ranges(lo, intervals)
        start, end = self.col_start[iv], self.col_end[iv]
        events = int(np.dot(count, intervals)) if len(intervals) else 0
        present = np.zeros(self.nblocks * self.block, bool)
        present[start] = True
        present[end] = True
        segments = np.flatnonzero(present)
        if segments.size * tiles > 4 * events:
            return None
        # In the cells' type: each row's sum is a difference of two subsets' bytes on a tile, which it holds
        # (cell_dtype), and wrapping integer sums come out exact whenever the result fits.
        per_class = list(whole.astype(self.dtype))
        position = np.cumsum(present) - 1
        dense = np.zeros((segments.size, tiles), self.dtype)
        rows = list(dense)  # views: no view made per add
        # Each interval adds its class's row where it starts and takes it where it ends: a few hundred rows per
        # layer, each a contiguous add. (One scatter of every interval x tile cost ten times as much at 1x
        # BERT-Large, and its float64 temporaries were most of a layer's page faults.)
        owner = np.repeat(np.arange(len(intervals)), intervals)
        for k, a, b in zip(owner.tolist(), position[start].tolist(), position[end].tolist()):
            row = per_class[k]
            rows[a] += row
            rows[b] -= row
        return self.row_change(segments, dense)

    def net_change(self, start: np.ndarray, end: np.ndarray, tile: np.ndarray, nbytes: np.ndarray
                   ) -> dict[str, np.ndarray]:
        """Intervals (start and end segment, tile, bytes; int64, bytes may be negative) as :meth:`merged` gives them."""
        present = np.zeros(self.nblocks * self.block, bool)
        present[start] = True
        present[end] = True
        segments = np.flatnonzero(present)
        blocks = np.unique(segments // self.block)
        if segments.size * self.tiles <= 4 * start.size:
            position = np.cumsum(present) - 1
            size = segments.size * self.tiles
            # float64 bincounts: exact while a cell's bytes are below 2**53 (so is their difference).
            dense = np.bincount(position[start] * self.tiles + tile, weights=nbytes, minlength=size)
            dense -= np.bincount(position[end] * self.tiles + tile, weights=nbytes, minlength=size)
            return self.row_change(segments, dense.astype(np.int64).astype(self.dtype).reshape(-1, self.tiles))
        uniq, inverse = unique_inverse(np.concatenate((start, end)) * self.tiles + np.concatenate((tile, tile)))
        net = np.zeros(len(uniq), np.int64)
        np.add.at(net, inverse, np.concatenate((nbytes, -nbytes)))
        keep = net != 0
        return {"cells": uniq[keep].astype(self.cell_dtype), "delta": net[keep].astype(self.dtype), "blocks": blocks}

    def row_change(self, segments: np.ndarray, dense: np.ndarray) -> dict[str, np.ndarray]:
        """A net change kept dense: the rows of ``segments`` (sorted, distinct) change by ``dense``'s rows.

        With the runs of consecutive segments (first, end, first row of ``dense``): :meth:`add` adds each run as
        one slice, in place. (An indexed add of the rows gathers them into a copy and scatters it back: a layer's
        rows fall in a few runs, and the slices took 0.6 of its time.)
        """
        first = np.flatnonzero(np.diff(segments, prepend=-2) != 1)  # where each run starts (segments are >= 0)
        start = segments[first]
        runs = np.stack((start, start + np.diff(first, append=segments.size), first), axis=1)
        return {"rows": segments, "dense": dense, "blocks": np.unique(segments // self.block),
                "runs": runs.astype(np.int64)}

    def add(self, events: dict[str, np.ndarray]) -> None:
        if "rows" in events:
            if events["rows"].size:
                rows, dense = self.diff.reshape(-1, self.tiles), events["dense"]
                for a, b, at in events["runs"].tolist():
                    run = rows[a:b]
                    np.add(run, dense[at:at + b - a], out=run)
                self._mark(events["blocks"])
            return
        if "cells" in events:
            if events["cells"].size:
                flat = self.diff.reshape(-1)
                flat[events["cells"]] += events["delta"]  # distinct cells: a plain indexed add is exact
                self._mark(events["blocks"])
            return
        if events["nbytes"].size == 0:
            return
        flat = self.diff.reshape(-1)
        # Integer scatter-adds: exact, whatever the order.
        np.add.at(flat, events["start"], events["nbytes"])
        np.add.at(flat, events["end"], -events["nbytes"])
        per_block = self.block * max(self.tiles, 1)
        self._mark(np.concatenate((events["start"], events["end"])) // per_block)

    def _mark(self, blocks: np.ndarray) -> None:
        self.stale[blocks] = True
        self.touched[blocks] = True

    def _refresh(self, lo: int, upto: int) -> None:
        """Net change of every block up to ``upto`` changed since the last reading, and the largest running sum of
        those after ``lo`` and before ``upto`` (the blocks a reading of blocks ``lo..upto`` takes whole).

        A reading uses no block after its window's last: a later block stays stale until a reading needs it (a
        forward window under pipeline recomputation never reads the backward blocks of its forward-cut grid).
        Of a block before the window (or at its ends) a reading needs the net change alone, a plain sum of its
        rows (the backward window of a re-run stage follows all its forward blocks); its largest running sum is
        taken when a reading takes the block whole. The running sums themselves are not kept: a reading takes
        them again for its window's two end blocks only (:meth:`_rows`), which halves the grid's memory.
        """
        stale = np.flatnonzero(self.stale[: upto + 1])
        if stale.size:
            self._end_rows = {key: top for key, top in self._end_rows.items() if not self.stale[key[0]]}
            self.max_stale[stale] = True
            self._known = min(self._known, int(stale[0]))
            self.stale[stale] = False
            summed = stale[(stale <= lo) | (stale == upto)]
            if summed.size:
                self.block_sum[summed] = self.diff[summed].sum(axis=1, dtype=self.dtype)
        whole = np.flatnonzero(self.max_stale[lo + 1: upto]) + lo + 1
        if whole.size == 0:
            return
        # Row by row along the blocks, the largest taken as the sums grow: one read of the blocks' rows (numpy's
        # cumsum over a middle axis is several times slower, and a copy of the blocks then a maximum over them
        # reads them three times).
        run = self.diff[whole, 0]
        top = run.copy()
        for r in range(1, self.block):
            np.add(run, self.diff[whole, r], out=run)
            np.maximum(top, run, out=top)
        self.block_max[whole] = top
        self.block_sum[whole] = run
        self.max_stale[whole] = False

    def _end_rows_of(self, kept: dict[tuple[int, int, int], np.ndarray], block: int, lo_row: int, hi_row: int
                     ) -> np.ndarray:
        """:meth:`_rows`, the last reading's when the block has not changed since; kept in ``kept`` (read only)."""
        key = (block, lo_row, hi_row)
        top = self._end_rows.get(key)
        if top is None:
            top = self._rows(block, lo_row, hi_row)
        kept[key] = top
        return top

    def _rows(self, block: int, lo_row: int, hi_row: int) -> np.ndarray:
        """Per tile, the largest running sum of rows ``lo_row..hi_row`` of ``block`` (from the block's start)."""
        rows = self.diff[block, : hi_row + 1]
        run = rows[0].copy()
        top = run.copy() if lo_row == 0 else np.full(self.tiles, np.iinfo(self.dtype).min, self.dtype)
        for r in range(1, hi_row + 1):
            np.add(run, rows[r], out=run)
            if r >= lo_row:
                np.maximum(top, run, out=top)
        return top

    def _extend_known(self, upto: int) -> np.ndarray:
        """Make :attr:`_before` valid at the touched blocks up to ``upto``.

        Returns the touched blocks up to ``upto``. An untouched block holds no
        change: its live bytes are, all through, those at the end of the last
        touched block before it, so only touched blocks are chained (a range
        touches a few blocks per layer, wherever its layers run, however long
        the profile) and :meth:`_before_of` gives the others.
        """
        touched = np.flatnonzero(self.touched[: upto + 1])
        start = self._known
        if start >= upto:
            return touched
        before, block_sum = self._before, self.block_sum
        k0 = int(np.searchsorted(touched, start))
        prev = int(touched[k0 - 1]) if k0 else -1
        # Row by row: numpy's cumsum over the first axis of a 2-D array is twice as slow.
        for t in touched[k0:].tolist():
            if prev < 0:
                before[t] = 0
            else:
                np.add(before[prev], block_sum[prev], out=before[t])
            prev = t
        self._known = upto
        return touched

    def _before_of(self, block: int, touched: np.ndarray) -> np.ndarray:
        """Live bytes before ``block`` (``touched``: the touched blocks up to it, :meth:`_extend_known`'s)."""
        if self.touched[block]:
            return np.asarray(self._before[block])
        k = int(np.searchsorted(touched, block))
        if k == 0:
            return np.zeros(self.tiles, self.dtype)
        prev = int(touched[k - 1])
        return np.asarray(self._before[prev] + self.block_sum[prev])

    def peak(self, lo: int, hi: int) -> np.ndarray:
        """Per tile, the most live bytes at any step ``lo..hi`` (inclusive)."""
        out = np.zeros(self.tiles, np.int64)
        if hi < lo or not self.touched.any():
            return out
        # Segment k covers steps ends[k] <= s < ends[k+1]; before ends[0] nothing is live.
        k_lo = int(np.searchsorted(self.ends, lo, side="right")) - 1
        k_hi = int(np.searchsorted(self.ends, hi, side="right")) - 1
        if k_hi < 0:
            return out
        first = max(k_lo, 0)
        b_lo, b_hi = first // self.block, k_hi // self.block
        self._refresh(b_lo, b_hi)
        # Live bytes before each touched block of the window: kept between readings.
        touched = self._extend_known(b_hi)
        lo_row, hi_row = first % self.block, k_hi % self.block
        kept: dict[tuple[int, int, int], np.ndarray] = {}
        if b_lo == b_hi:
            out = self._end_rows_of(kept, b_lo, lo_row, hi_row) + self._before_of(b_lo, touched)
        else:
            out = self._end_rows_of(kept, b_lo, lo_row, self.block - 1) + self._before_of(b_lo, touched)
            np.maximum(out, self._end_rows_of(kept, b_hi, 0, hi_row) + self._before_of(b_hi, touched), out=out)
            # Inside the window only touched blocks count: an untouched one holds the bytes at the end of the
            # block before it, which that block's rows (in the window) already reach.
            inside = touched[(touched > b_lo) & (touched < b_hi)]
            if inside.size:
                np.maximum(out, (self.block_max[inside] + self._before[inside]).max(axis=0), out=out)
        self._end_rows = kept
        return np.asarray(np.maximum(out, 0), np.int64)


def cell_dtype(profile: Profile) -> type[np.signedinteger]:
    """The grid's cells: int32 when no tile's variables reach 2**31 bytes in all.

    Every live figure is then the bytes of a subset of them, and every partial
    sum (within a block, or a block's net change) the difference of two. It
    reads the variables' tiles and bytes only, a slice at a time: the float64 weights and index copies of a
    whole column (18 M variables at 120 BERT-Large layers) cost more in page faults than the sums.
    """
    v = profile.variables
    per_tile = np.zeros(profile.tiles, np.int64)
    for at in range(0, v.count, _SLICE):
        # float64 bincounts: exact while a tile's bytes in one slice are below 2**53.
        per_tile += np.bincount(v.tile[at:at + _SLICE], weights=v.bytes[at:at + _SLICE],
                                minlength=profile.tiles).astype(np.int64)
    return np.int32 if per_tile.size == 0 or per_tile.max() < 2**31 - 1 else np.int64


#: Variables per slice of :func:`cell_dtype`: its temporaries stay in the cache.
_SLICE = 1 << 18


def segment_ends(profile: Profile) -> np.ndarray:
    """The distinct interval starts and ends of the profile's liveness classes: where segments begin.

    A mask over the steps, not a sort (the steps are not negative: the loader checks them, and a what-if profile
    takes its intervals from them); every option set's grids ask again.
    """
    size = max(int(profile.iv_start.max(initial=-1)), int(profile.iv_end.max(initial=-1))) + 1
    return np.asarray(union_of(np.concatenate((profile.iv_start, profile.iv_end)), size), np.int64)
