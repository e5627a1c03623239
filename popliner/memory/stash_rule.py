"""What one activation stash entry of a pipeline stage holds: the rule, as pure functions of live steps.

A stage's stash keeps, for every micro-batch in flight between its forward
and its backward part, the variables that cross from one to the other. The
windows are the steps of the two parts (:func:`popliner.memory.stages.stash_windows`);
``stash_inputs`` and ``inputs_only`` are the training view's recomputation
rules (:class:`popliner.memory.training.TrainingView`). The figures
(:mod:`popliner.memory.stages`) apply them to the facts' variables; kept apart so that the rule reads on its own.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["StashWindows", "stash_mask", "stash_positions", "stash_select"]

#: (forward first step, forward last step, backward first step, backward last step) of a stage.
StashWindows = tuple[int, int, int, int]


def stash_mask(first: np.ndarray, last: np.ndarray, windows: StashWindows) -> np.ndarray:
    """Which variables (first and last live step) belong to one stash entry of a stage.

    A stashed variable goes live during the stage's forward part and dies
    during its backward part: it must be kept for every micro-batch in flight
    between the two. Always-live variables must have been left out already.
    """
    fwd_lo, fwd_hi, bwd_lo, bwd_hi = windows
    # (x >= lo) & (x <= hi) for int64 x and lo <= hi, in one comparison each.
    in_fwd = (first - fwd_lo).view(np.uint64) <= np.uint64(fwd_hi - fwd_lo)
    in_bwd = (last - bwd_lo).view(np.uint64) <= np.uint64(bwd_hi - bwd_lo)
    return np.asarray(in_fwd & in_bwd)


def stash_select(first: np.ndarray, last: np.ndarray, windows: StashWindows, stash_inputs: bool,
                 inputs_only: bool) -> np.ndarray:
    """Which candidates (first and last live step) one stash entry of a stage holds, by the training options.

    Today's rule (:func:`stash_mask`) takes what goes live in the forward
    part and dies in the backward part. Recomputing modes also take what
    went live before the forward part (the stage's received inputs);
    ``pipeline`` takes only those.
    """
    if not stash_inputs:
        return stash_mask(first, last, windows)
    fwd_lo, fwd_hi, bwd_lo, bwd_hi = windows
    early = first < fwd_lo if inputs_only else first <= fwd_hi
    in_bwd = (last - bwd_lo).view(np.uint64) <= np.uint64(bwd_hi - bwd_lo)
    return np.asarray(early & (first >= 0) & in_bwd)


def stash_positions(first: np.ndarray, last: np.ndarray, rows: Sequence[StashWindows | None], stash_inputs: bool,
                    inputs_only: bool) -> np.ndarray | None:
    """For a stage that grows one layer at a time, the first growth at which each candidate joins its stash.

    ``rows[p]`` are the stage's :func:`popliner.memory.stages.stash_windows` after ``p + 1``
    layers. While the windows only widen (the forward part starts no
    later and ends no earlier, and so does the backward part), every
    condition of :func:`stash_select` that holds at one growth holds at
    every later one, so a candidate, once in the entry, stays in it: the
    growth it joins at is the latest of the first growths at which each
    condition holds, a binary search each. The result is the position in
    ``rows``, or ``len(rows)`` when it never joins; None when the windows
    do not only widen (or ``pipeline``'s received inputs change with the
    forward part's start), and the caller must use :func:`stash_select`
    at each growth.
    """
    m = len(rows)
    known = np.array([w is not None for w in rows], bool)
    if known.any() and not known[int(np.argmax(known)):].all():
        return None  # a stage with a forward and a backward part keeps them as it grows
    big = np.iinfo(np.int64).max // 4
    # A growth without windows holds nothing: bounds that no step meets.
    w = np.array([r if r is not None else (big, -big, big, -big) for r in rows], np.int64).reshape(m, 4)
    fwd_lo, fwd_hi, bwd_lo, bwd_hi = w[:, 0], w[:, 1], w[:, 2], w[:, 3]
    if (np.diff(fwd_lo) > 0).any() or (np.diff(fwd_hi) < 0).any() or (np.diff(bwd_lo) > 0).any() or (
            np.diff(bwd_hi) < 0).any():
        return None
    # searchsorted(a, x) on a non-decreasing a: the first growth with a[p] >= x.
    in_bwd = np.maximum(np.searchsorted(-bwd_lo, -last), np.searchsorted(bwd_hi, last))
    if not stash_inputs:
        in_fwd = np.maximum(np.searchsorted(-fwd_lo, -first), np.searchsorted(fwd_hi, first))
        return np.asarray(np.maximum(in_fwd, in_bwd))
    if inputs_only:
        starts = fwd_lo[known]
        if starts.size and starts.min() != starts.max():
            return None  # what counts as received changes as the forward part starts earlier
        early = first < (starts[0] if starts.size else big)
        return np.asarray(np.where(early & (first >= 0), in_bwd, m))
    return np.asarray(np.where(first >= 0, np.maximum(np.searchsorted(fwd_hi, first), in_bwd), m))
