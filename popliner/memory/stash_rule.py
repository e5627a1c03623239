"""What one activation stash entry of a pipeline stage holds: the rule, as a pure function of live steps.

A stage's stash keeps, for every micro-batch in flight between its forward
and its backward part, the variables that cross from one to the other. The
windows are the steps of the two parts (:func:`popliner.memory.stages.stash_windows`);
``stash_inputs`` and ``inputs_only`` are the training view's recomputation
rules (:class:`popliner.memory.training.TrainingView`). The figures
(:mod:`popliner.memory.stages`) apply them to the facts' variables; kept apart so that the rule reads on its own.
"""

from __future__ import annotations

import numpy as np

__all__ = ["StashWindows", "stash_select"]

#: (forward first step, forward last step, backward first step, backward last step) of a stage.
StashWindows = tuple[int, int, int, int]


def stash_select(first: np.ndarray, last: np.ndarray, windows: StashWindows, stash_inputs: bool,
                 inputs_only: bool) -> np.ndarray:
    """Which candidates (first and last live step) one stash entry of a stage holds, by the training options.

    Today's rule takes what goes live in the forward part and dies in the
    backward part (always-live variables must have been left out already).
    Recomputing modes also take what went live before the forward part (the
    stage's received inputs); ``pipeline`` takes only those.
    """
    fwd_lo, fwd_hi, bwd_lo, bwd_hi = windows
    # (x >= lo) & (x <= hi) for int64 x and lo <= hi, in one comparison each.
    in_bwd = (last - bwd_lo).view(np.uint64) <= np.uint64(bwd_hi - bwd_lo)
    if not stash_inputs:
        return np.asarray(((first - fwd_lo).view(np.uint64) <= np.uint64(fwd_hi - fwd_lo)) & in_bwd)
    early = first < fwd_lo if inputs_only else first <= fwd_hi
    return np.asarray(early & (first >= 0) & in_bwd)
