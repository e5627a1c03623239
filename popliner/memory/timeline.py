"""Live variable bytes at every program step of a window: the liveness picture of a stage.

The memory model only needs the peak of these series (see
:mod:`popliner.memory.liveness`); the report draws the whole series, so the
peak it shows is the one the model counts.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import expand_ranges
from popliner.memory.model import MemoryModel
from popliner.profile.model import Profile

__all__ = ["live_bytes_per_step", "stage_live_bytes"]


def stage_live_bytes(model: MemoryModel, ops: np.ndarray, tile: int | None = None) -> tuple[int, np.ndarray]:
    """The first step of a stage's window and its counted variables' live bytes at each step of it.

    The series whose peak is the stage's variables component: the same
    window, variables and profile as ``model`` (the training what-ifs' profile
    when ``model`` is a scenario's), on ``tile`` or summed over tiles.
    """
    lo, hi = model.window(ops)
    return lo, live_bytes_per_step(model.profile, model.counted_variables(ops), lo, hi, tile=tile)


def live_bytes_per_step(profile: Profile, var_idx: np.ndarray, lo: int, hi: int, tile: int | None = None) -> np.ndarray:
    """Bytes of ``var_idx`` live at each step ``lo..hi`` (int64, ``hi - lo + 1`` values).

    On one ``tile``, or summed over all tiles when ``tile`` is None. A
    variable is live at step s when an interval of its liveness class has
    ``start <= s < end``; variables listed twice count twice, as in the peaks.
    """
    if hi < lo:
        return np.zeros(0, np.int64)
    v = profile.variables
    var_idx = np.asarray(var_idx, np.int64)
    if tile is not None:
        var_idx = var_idx[v.tile[var_idx] == tile]
    if var_idx.size == 0:
        return np.zeros(hi - lo + 1, np.int64)
    # One +bytes/-bytes event pair per interval of every class in use, with the
    # class's bytes summed first (float64 sums are exact below 2**53 bytes).
    per_class = np.bincount(v.klass[var_idx], weights=v.bytes[var_idx], minlength=profile.num_classes)
    classes = np.flatnonzero(per_class)
    counts = profile.class_ptr[classes + 1] - profile.class_ptr[classes]
    iv = expand_ranges(profile.class_ptr[classes], counts)
    weight = np.repeat(per_class[classes], counts)
    start = np.clip(profile.iv_start[iv], lo, hi + 1) - lo
    end = np.clip(profile.iv_end[iv], lo, hi + 1) - lo
    keep = start < end
    n = hi - lo + 2
    diff = (np.bincount(start[keep], weights=weight[keep], minlength=n)
            - np.bincount(end[keep], weights=weight[keep], minlength=n))
    return np.rint(np.cumsum(diff)[:-1]).astype(np.int64)
