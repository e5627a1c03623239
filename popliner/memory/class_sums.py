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

from dataclasses import dataclass

import numpy as np

from popliner.arrays import rank_by_table

__all__ = ["ClassSums", "class_sums", "with_candidate_classes"]


@dataclass(frozen=True, eq=False)
class ClassSums:
    """Per distinct liveness class of some variables (sorted): how many, and their bytes per tile.

    ``stash_count`` and ``stash_bytes``: the same of the stash candidates
    alone (None when no candidate flags were given).
    """

    classes: np.ndarray  # int64, sorted distinct classes
    count: np.ndarray  # int64 [classes]
    per_class: np.ndarray  # float64 [classes, tiles] (integer values)
    stash_count: np.ndarray | None = None  # int64 [classes]
    stash_bytes: np.ndarray | None = None  # float64 [classes, tiles] (integer values)


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
    """``sums`` with the stash candidates those of the classes marked in ``candidate_class`` (bool per class).

    For a profile as loaded, where whether a stash entry may hold a variable
    depends on its class alone (not always live).
    """
    pick = candidate_class[sums.classes]
    return ClassSums(sums.classes, sums.count, sums.per_class, np.where(pick, sums.count, 0),
                     sums.per_class * pick[:, None])
