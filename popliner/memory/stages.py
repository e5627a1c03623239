"""The figures of a set of operations: pure functions of a scenario's memory facts.

Their place among the figures: docs/solvers.md, 'Where the figures come from'. Callers give operation
indices, or layer indices; the unlayered operations go with the first stage (``first_stage=True``).

Training-dependent figures each have one named function, so that a change
to the training model (:class:`popliner.memory.training.TrainingView`, the
facts' ``view``) changes them in one place:

- :func:`backward_part`: which operations of a stage are backward;
- :func:`stash_windows` and :mod:`popliner.memory.stash_rule`: what one
  stash entry holds; :func:`stash_entry_per_tile` sums it per tile;
- :func:`cycles_split`: forward and backward cycles of a stage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.memory.facts import MemoryFacts
from popliner.memory.liveness import window_peak
from popliner.memory.stash_rule import StashWindows, stash_select
from popliner.memory.types import StageMemory
from popliner.ops.layers import ops_of_layers

__all__ = [
    "backward_part",
    "cycles_split",
    "pipeline_rerun_part",
    "pipeline_rerun_window",
    "range_ops",
    "rerun_cycles",
    "select_stash",
    "stage_memory",
    "stage_ops",
    "stash_entry_per_tile",
    "stash_windows",
    "steps_of",
]


# -- operations of a stage ---------------------------------------------------


def stage_ops(facts: MemoryFacts, layers: Sequence[int], first_stage: bool) -> np.ndarray:
    """Operations of the given layers, plus the unlayered ones for the first stage."""
    return ops_of_layers(facts.layer_of_op, layers, first_stage)


def range_ops(facts: MemoryFacts, i: int, j: int, with_head: bool = False) -> np.ndarray:
    """Operations of the contiguous layer range ``i..j``; range 0.. holds the unlayered ones; ``with_head``: and
    the wrapped head's (IPU 0's). :func:`stage_ops` of those layers, from two comparisons rather than a set test."""
    layer = facts.layer_of_op
    mask = (layer >= i) & (layer <= j)
    if i == 0:
        mask |= layer < 0
    if with_head:
        mask |= layer == facts.head_layer
    return np.flatnonzero(mask)


# -- memory ----------------------------------------------------------------


def stage_memory(facts: MemoryFacts, ops: np.ndarray, variables: np.ndarray | None = None,
                 rerun_variables: np.ndarray | None = None) -> StageMemory:
    """Per-tile memory of a set of operations (the direct model, memoised).

    ``variables``: the set's variables peak per tile when already known
    exactly (see :meth:`popliner.memory.model.MemoryModel.stage`; not read for a re-run set). A stage
    re-run under ``--recompute pipeline`` (:func:`pipeline_rerun_part`)
    peaks as docs/solvers.md ('How popliner applies them') says, a wrapped
    head's variables keeping their live steps (it re-runs nothing);
    ``rerun_variables``: that peak when already known exactly (a range
    table's running set, :mod:`popliner.memory.rerun`), given only for a re-run set: the caller found its
    window (:func:`pipeline_rerun_window`), which is then not worked out again.
    """
    rerun = pipeline_rerun_window(facts, ops) if rerun_variables is None else None
    if rerun is None and rerun_variables is None:
        return facts.model.stage(ops, variables)

    def rerun_figure() -> StageMemory:
        peak = rerun_variables
        if peak is None:
            assert rerun is not None  # no peak given: the window was worked out above
            b0, head_kept = rerun
            lo, hi = facts.model.window(ops)
            var = facts.model.counted_variables(ops)
            forward = window_peak(facts.forward_cut_profile(head_kept), var, lo, b0 - 1)
            backward = window_peak(facts.profile, var, b0, hi)
            peak = np.maximum(forward, backward)
        # The set's other components, with the re-run peak for its variables (the plain peak is never read).
        return facts.model.with_variables(ops, peak)

    return facts.rerun_figure(ops, rerun_figure)


def pipeline_rerun_window(facts: MemoryFacts, ops: np.ndarray) -> tuple[int, bool] | None:
    """Under ``--recompute pipeline``, where the set's re-run part splits into forward and backward windows.

    ``(b0, head_kept)``: the first step of the re-run part's backward
    part, and whether the set also holds a wrapped head's operations
    (whose variables keep their live steps). None when the set's figure
    is the plain model's: nothing re-run (other modes, the last stage),
    or a re-run part that is all forward or all backward.
    """
    own = pipeline_rerun_part(facts, ops)
    if not own.size:
        return None
    back = backward_part(facts, own)
    if not back.any() or back.all():
        return None
    return int(facts.model.window(own[back])[0]), own.size != len(ops)


def pipeline_rerun_part(facts: MemoryFacts, ops: np.ndarray) -> np.ndarray:
    """Under ``--recompute pipeline``, the operations of an IPU's set that PopART re-runs from the stash.

    Every stage but the one whose forward and backward are back to back
    (docs/solvers.md, ``--recompute``): the set holding the last layer re-runs
    nothing, unless that layer is a wrapped head: a set holding ``head`` and
    ``embedding`` but not every layer is IPU 0 of a pipeline, whose own first
    stage is re-run (one holding every layer is no pipeline). Empty for the
    other modes.
    """
    n = facts.num_layers
    if facts.view.recompute != "pipeline" or not n:
        return ops[:0]
    layers = facts.layer_of_op[ops]
    holds_last = layers == n - 1
    if not holds_last.any():
        return ops
    if facts.head_wraps and (layers == 0).any() and not np.isin(np.arange(n), layers).all():
        return np.asarray(ops[~holds_last])
    return ops[:0]


# -- training ----------------------------------------------------------------


def backward_part(facts: MemoryFacts, ops: np.ndarray) -> np.ndarray:
    """Bool per operation of a stage: in the stage's backward part.

    The backward part starts at the stage's first operation whose name marks
    it as backward; everything from that step on belongs to it. Names alone
    would leave out call sites and helpers of the backward pass that carry
    no gradient name.
    """
    named = facts.is_backward[ops]
    if not named.any():
        return np.zeros(len(ops), bool)
    first = facts.ops.first_step[ops]
    start = int(first[named & (first >= 0)].min(initial=np.iinfo(np.int64).max))
    return np.asarray(named | (first >= start))


def stash_windows(facts: MemoryFacts, ops: np.ndarray) -> StashWindows | None:
    """The steps of the stage's forward and backward parts; None when it has no stash (inference too)."""
    if not facts.training:
        return None
    back = backward_part(facts, ops)
    fwd_lo, fwd_hi = facts.model.window(ops[~back])
    bwd_lo, bwd_hi = facts.model.window(ops[back])
    if fwd_hi < fwd_lo or bwd_hi < bwd_lo:
        return None
    return fwd_lo, fwd_hi, bwd_lo, bwd_hi


def stash_entry_per_tile(facts: MemoryFacts, ops: np.ndarray) -> np.ndarray:
    """Bytes per tile of one activation stash entry of the stage (zero in inference)."""
    out = np.zeros(facts.tiles, np.int64)
    windows = stash_windows(facts, ops)
    if windows is None:
        return out
    var = facts.model.counted_variables(ops)
    var = var[facts.stash_candidate[var]]
    stash = var[select_stash(facts, *steps_of(facts, var), windows)]
    v = facts.profile.variables
    # float64 bincount: exact while a tile's entry is below 2**53 bytes.
    return np.bincount(v.tile[stash], weights=v.bytes[stash], minlength=facts.tiles).astype(np.int64)


def select_stash(facts: MemoryFacts, first: np.ndarray, last: np.ndarray, windows: StashWindows) -> np.ndarray:
    """Which candidates (first and last live step) one stash entry of a stage holds (:func:`stash_select`)."""
    return stash_select(first, last, windows, facts.view.stash_inputs, facts.view.inputs_only)


def cycles_split(facts: MemoryFacts, ops: np.ndarray) -> tuple[int, int]:
    """(forward, backward) cycles of one micro-batch through the stage, re-run forward work in the backward."""
    back = backward_part(facts, ops)
    cyc = facts.cycles.op_cycles[ops]
    return int(cyc[~back].sum()), int(cyc[back].sum()) + rerun_cycles(facts, ops)


def rerun_cycles(facts: MemoryFacts, ops: np.ndarray) -> int:
    """Cycles of the forward work the stage runs again in its backward part (in :func:`cycles_split`'s backward)."""
    if facts.view.recompute == "pipeline":
        ops = pipeline_rerun_part(facts, ops)
    return int(facts.cycles.op_cycles[ops][facts.view.rerun_ops[ops]].sum())


# -- variables and boundaries ----------------------------------------------------


def steps_of(facts: MemoryFacts, var: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """First and last live step of some variables (:func:`popliner.memory.liveness.variable_steps`), through their
    classes."""
    starts, ends = facts.class_steps
    klass = facts.profile.variables.klass[var]
    return starts[klass], ends[klass]

