"""Variables summed per liveness class and tile: the value the grid and the stash columns both read.

Made by :func:`popliner.memory.class_sums.class_sums`; it lives here, with
the liveness grid that reads it, so that the liveness package needs nothing
else of :mod:`popliner.memory`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["ClassSums"]


@dataclass(frozen=True, eq=False)
class ClassSums:
    """Per distinct liveness class of some variables (sorted): how many, and their bytes per tile.

    ``stash_count`` and ``stash_bytes``: the same of the stash candidates
    alone (None when no candidate flags were given); the rows of classes
    with no candidate are not read (:func:`with_candidate_classes` leaves them).
    """

    classes: np.ndarray  # int64, sorted distinct classes
    count: np.ndarray  # int64 [classes]
    per_class: np.ndarray  # float64 [classes, tiles] (integer values)
    stash_count: np.ndarray | None = None  # int64 [classes]
    stash_bytes: np.ndarray | None = None  # float64 [classes, tiles] (integer values)
