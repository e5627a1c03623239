"""A layer's variables summed per liveness class and tile, once, for both the grid's change and the stash columns.

Every figure a layer's private variables give a range table depends on a
variable only through its liveness class (its intervals, so its first and
last live step), its tile and its bytes, plus, in training, whether a stash
entry may hold it. :meth:`popliner.memory.liveness.grid.SegmentGrid.merged`
sums the variables' bytes per (class, tile) to make the grid's dense rows,
and :func:`popliner.memory.stash_row.stash_columns` sums the stash
candidates' bytes per ((first, last) pair, tile): two passes over some
150,000 variables per layer, each ranking the classes and scattering the
bytes. :func:`class_sums` makes one: a (class, candidate or not, tile)
bincount, from which both sets of rows are a few sums of whole rows over the
few hundred classes present. The same integers as the two passes (float64
sums of integer bytes, exact below 2**53, in another order).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from popliner.arrays import expand_ranges, rank_by_table
from popliner.memory.liveness.sums import ClassSums
from popliner.memory.stash_row import grouped_of_sums

if TYPE_CHECKING:
    from popliner.memory.liveness.grid import ClassIntervals, SegmentGrid
    from popliner.profile.model import Profile

__all__ = ["ClassSums", "changed_rows", "changed_stash", "class_sums", "with_candidate_classes"]


def class_sums(klass: np.ndarray, tile: np.ndarray, nbytes: np.ndarray, tiles: int,
               candidate: np.ndarray | None = None) -> ClassSums | None:
    """The variables' :class:`ClassSums` from their classes, tiles and bytes; ``candidate``: bool per variable.

    None when there are no tiles or the classes span too many numbers for a
    table (the callers then take their own paths, which give up there too).
    """
    ranked = rank_by_table(klass) if tiles else None
    if ranked is None:
        return None
    classes, rank = ranked
    k = len(classes)
    if candidate is None:
        count = np.bincount(rank, minlength=k)
        per_class = np.bincount(rank * tiles + tile, weights=nbytes, minlength=k * tiles).reshape(k, tiles)
        return ClassSums(classes, count, per_class)
    # One key per (class, candidate or not): both sums from one scatter of the variables.
    key = 2 * rank + candidate
    counts = np.bincount(key, minlength=2 * k).reshape(k, 2)
    sums = np.bincount(key * tiles + tile, weights=nbytes, minlength=2 * k * tiles).reshape(k, 2, tiles)
    # Integer-valued float64 below 2**53: the sum of the two halves is exact.
    return ClassSums(classes, counts.sum(axis=1), sums[:, 0] + sums[:, 1], counts[:, 1], sums[:, 1])


def with_candidate_classes(sums: ClassSums, candidate_class: np.ndarray) -> ClassSums:
    """``sums`` with the stash candidates only those of the classes marked in ``candidate_class`` (bool per class).

    A class not always live may have its variables stashed: with no
    candidate flags in ``sums``, all of its variables are candidates (a
    profile as loaded), else its flagged ones. The rows of the classes left
    out are kept as they are: a class with no candidate is never read.
    """
    pick = candidate_class[sums.classes]
    if sums.stash_count is None or sums.stash_bytes is None:
        count, rows = sums.count, sums.per_class
    else:
        count, rows = sums.stash_count, sums.stash_bytes
    return ClassSums(sums.classes, sums.count, sums.per_class, np.where(pick, count, 0), rows)


def changed_rows(grid: SegmentGrid, base: Profile, base_start: np.ndarray, base_end: np.ndarray, pick: np.ndarray
                 ) -> dict[str, np.ndarray] | None:
    """The net change on ``grid`` of the variables ``pick`` as its profile has them less as ``base`` has them.

    What :meth:`SegmentGrid.net_change` makes of both sets of intervals
    (the profiled ones taken away), from the bytes summed per class of each
    profile: a variable whose class or bytes an option changed. ``base_start``
    and ``base_end``: the base profile's interval ends as columns of
    ``grid``. None where the change would be kept as distinct cells.
    """
    now = grid.p
    tile = now.variables.tile[pick]  # the same tiles in both profiles (checked when the share was made)
    mine = class_sums(now.variables.klass[pick], tile, now.variables.bytes[pick], grid.tiles)
    theirs = class_sums(base.variables.klass[pick], tile, base.variables.bytes[pick], grid.tiles)
    if mine is None or theirs is None:
        return None
    groups: list[ClassIntervals] = []
    for sums, profile, starts, ends, sign in ((mine, now, grid.col_start, grid.col_end, 1),
                                              (theirs, base, base_start, base_end, -1)):
        lo, hi = profile.class_ptr[sums.classes], profile.class_ptr[sums.classes + 1]
        iv = expand_ranges(lo, hi - lo)
        groups.append((starts[iv], ends[iv], hi - lo, sums.count, sums.per_class if sign == 1 else -sums.per_class))
    return grid.interval_rows(groups)


def changed_stash(var: np.ndarray, now: Profile, base: Profile, never_stash: np.ndarray,
                  now_classes: tuple[np.ndarray, np.ndarray, np.ndarray],
                  base_classes: tuple[np.ndarray, tuple[np.ndarray, np.ndarray]]
                  ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]] | None:
    """The stash columns of ``var`` in ``now`` and, with their bytes taken away, as profiled (``base``).

    What :func:`popliner.memory.stash_row.candidate_columns` groups by
    (first, last) pair for each (the correction of the variables an option
    changes), from the bytes summed per class. ``now_classes``: per class of
    ``now``, always live, first and last step; ``base_classes``: per class
    of ``base``, may a stash entry hold it, and its steps. ``never_stash``:
    per variable, recomputed (``every-layer``). None where either would
    not be grouped by pairs.
    """
    tiles = now.tiles
    tile = now.variables.tile[var]
    always, first, last = now_classes
    mine = class_sums(now.variables.klass[var], tile, now.variables.bytes[var], tiles, ~never_stash[var])
    theirs = class_sums(base.variables.klass[var], tile, base.variables.bytes[var], tiles)
    if mine is None or theirs is None:
        return None
    grouped = grouped_of_sums(with_candidate_classes(mine, ~always), (first, last), tiles)
    taken = grouped_of_sums(with_candidate_classes(theirs, base_classes[0]), base_classes[1], tiles)
    if grouped is None or taken is None:
        return None
    taken["dense"] = -taken["dense"]  # integers: the same as summing the negated bytes
    return grouped, taken
