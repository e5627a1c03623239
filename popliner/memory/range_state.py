"""What every range table of one scenario shares, whatever its limit: the scenario's range memo.

A solve builds several tables on one scenario's memory facts (the asked
budget, relaxed budgets for a best-effort split, the fewest-IPUs search,
the exit-3 hint), and what they share (each layer's parts, the liveness
grid, every range figure already evaluated, the running sets a row stopped
at) is costly to build. :class:`RangeMemo` holds it, one
:class:`RangeState` per :class:`popliner.memory.running.Pieces`; the
scenario owns its memo (:attr:`popliner.analysis.Analysis.range_memo`), so
it lives exactly as long as the scenario: no cache outside it, and a table
built anywhere on the same scenario reuses it. The facts hold none of it.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import content_key
from popliner.memory.facts import MemoryFacts
from popliner.memory.figure_share import layers_touched
from popliner.memory.layer_vars import LayerVariables
from popliner.memory.liveness import SegmentGrid
from popliner.memory.ranges_shared import EngineShare, SharedParts, VarSet
from popliner.memory.rerun import ForwardCut, forward_cut_grid
from popliner.memory.running import LayerParts, Pieces, RunningStage
from popliner.memory.stages import pipeline_rerun_window, range_ops

__all__ = ["RangeMemo", "RangeState"]


def _layer_ops(facts: MemoryFacts) -> list[np.ndarray]:
    """Each layer's operations (:func:`range_ops` of ``k..k``; read only), made once per layering in the facts'
    option-free memo: the option sets of a plan have two or three layerings (the head placements)."""
    key = content_key(b"layer-ops:", facts.layer_of_op, facts.num_layers.to_bytes(8, "little"))
    found: tuple[np.ndarray, ...] | None = facts.memo.get(key)
    if found is None:
        found = tuple(range_ops(facts, k, k) for k in range(facts.num_layers))
        for ops in found:
            ops.flags.writeable = False
        facts.memo[key] = found
    return list(found)


class RangeMemo:
    """One scenario's range states (one per :class:`Pieces`), built by the first table that needs each.

    ``shared``: the option-free parts of the scenario's profile, which every
    option set's tables start from (:class:`SharedParts`). The tables of the
    memo read one memory facts value only (the first's).
    """

    def __init__(self, shared: SharedParts) -> None:
        self.shared = shared
        self._facts: MemoryFacts | None = None
        self._states: dict[Pieces, RangeState] = {}

    def state(self, facts: MemoryFacts, pieces: Pieces) -> RangeState:
        """The range state of ``facts`` in ``pieces``."""
        if self._facts is None:
            if facts.base_profile is not self.shared.profile or facts.ops is not self.shared.ops:
                raise ValueError("a range memo takes the memory facts of its own profile and operations only")
            self._facts = facts
        elif facts is not self._facts:
            raise ValueError("a range memo serves the memory facts of one scenario only")
        found = self._states.get(pieces)
        if found is None:
            found = self._states[pieces] = RangeState(facts, self.shared, pieces)
        return found

    def release(self) -> None:
        """Drop the range states now, for a caller done with the scenario's tables.

        Their grids' buffers go back to the shared parts, for the next option
        set's tables (no table of this memo may be read after this).
        """
        for state in {id(s): s for s in self._states.values()}.values():
            state.recycle(self.shared)
        self._states.clear()


class RangeState:
    """Per scenario (and :class:`Pieces`): what every range table of the scenario can reuse."""

    def __init__(self, facts: MemoryFacts, shared: SharedParts, pieces: Pieces) -> None:
        self.facts = facts
        self.layer_ops = _layer_ops(facts)
        dtype = shared.grid_dtype(facts.profile)
        # Made without buffers: each takes those an earlier option set gave back (no page faults, no zeroing), else
        # new ones.
        self.grid = SegmentGrid.of(facts.profile, pieces.grid_block, dtype, buffers=False)
        #: ``--recompute pipeline``: running sets keep their variables' forward-cut liveness too.
        self.rerun = facts.view.recompute == "pipeline"
        self.cut_grid = forward_cut_grid(facts, dtype, pieces.grid_block, buffers=False) if self.rerun else None
        for grid in (self.grid, self.cut_grid):
            if grid is not None:
                shared.take_buffers(grid)
        self.pieces = pieces
        #: The profile's option-free parts and these facts' own pieces on them (``popliner plan``: one scenario per
        #: option set, all on the same parts).
        self.share = EngineShare(shared, facts, self.grid, self.cut_grid)
        #: What a range's figure depends on besides its operations: scenarios of equal signatures share figures.
        self._signature = self.share.signature(facts)
        counted = facts.model.counted_vars
        self._layer_keys = [ops.tobytes() + counted[ops].tobytes() for ops in self.layer_ops]
        #: Per layer: do its variables take the figures of the group's reference (:mod:`popliner.memory.figure_share`)?
        self._alike: np.ndarray | None = None
        self._parts: dict[int, LayerParts] = {}
        #: Every layer's private and shared variables, found for all layers at once when the first is needed.
        self._variables: LayerVariables | None = None
        #: (i, j) -> (worst tile bytes, stash entry per tile, total per tile)
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]] = {}
        #: (i, j) -> the variables peak per tile the figure of a range evaluated took (a re-run range's, re-run).
        self.peaks: dict[tuple[int, int], np.ndarray] = {}
        #: Ranges whose model figure the facts' model holds (see ProfileRanges.stage_memory).
        self.staged: set[tuple[int, int, bool]] = set()
        #: Per start: the running set where its row stopped, to grow it for a higher limit.
        self.resume: dict[int, RunningStage] = {}
        #: (i, j) -> :func:`pipeline_rerun_window` of the range's layers (pipeline recomputation).
        self._rerun_windows: dict[tuple[int, int], tuple[int, bool] | None] = {}

    def recycle(self, shared: SharedParts) -> None:
        """Give the grids' buffers back to ``shared`` (cleared); this state is not to be read again."""
        for grid in (self.grid, self.cut_grid):
            if grid is not None:
                shared.give_buffers(grid)
        self.resume.clear()

    def layer_parts(self, j: int) -> LayerParts:
        """What layer ``j`` adds to any range holding it (memoised: every start reuses it)."""
        parts = self._parts.get(j)
        if parts is None:
            found = self._layer_variables()
            variables = found.split(j, self.layer_ops[j])
            # The private variables' runs give their key without a pass over them.
            sets = (VarSet(self.share.shared, variables[0], found.private_runs(j)),
                    VarSet(self.share.shared, variables[1]))
            parts = self._parts[j] = LayerParts.of(self.facts, self.layer_ops[j], self.share, variables, sets)
        return parts

    def private_variables(self, j: int) -> np.ndarray:
        """Layer ``j``'s private counted variables (sorted): what a kept head's forward-cut liveness reads."""
        return self._layer_variables().private(j)

    def _layer_variables(self) -> LayerVariables:
        if self._variables is None:
            self._variables = LayerVariables.of(self.facts)
        return self._variables

    def _shares(self, i: int, j: int) -> bool:
        """Does range ``i..j`` take (and offer) the figures of the group's reference?"""
        if not self.share.shares:
            return False
        if self._alike is None:
            self._alike = self._layers_alike()
        return bool(self._alike[i:j + 1].all())

    def _layers_alike(self) -> np.ndarray:
        """Per layer: does this option set treat its variables as the group's reference does? The first to ask is
        the reference."""
        shared = self.share.shared
        view = self.share.view(self._signature)
        if shared.reference is None:
            shared.reference = view
            return np.ones(len(self.layer_ops), bool)
        differs = view.differs(shared.reference)
        if differs is None:
            return np.zeros(len(self.layer_ops), bool)
        if not differs.any():  # the head placements of a recomputation and state that cuts no head's variables
            return np.ones(len(self.layer_ops), bool)
        v = self._layer_variables()
        return ~layers_touched(differs, v.starts, v.lengths, v.ptr,
                               [v.shared_of(k, ops) for k, ops in enumerate(self.layer_ops)])

    def other_figure(self, i: int, j: int) -> tuple[int, np.ndarray, np.ndarray] | None:
        """The figure of ``i..j`` when a scenario of the same variable tables and rules evaluated the same operations.

        Kept here too (in :attr:`figures`) when found. None for an option set alone (no other shares its parts).
        """
        if not self._shares(i, j):
            return None
        found = self.share.shared.range_figures.get(self._other_key(i, j))
        if found is None:
            return None
        worst, stash, total, peak = found
        known = self.figures[(i, j)] = (worst, stash.astype(np.int64), total.astype(np.int64))
        if peak is not None:
            self.peaks[(i, j)] = peak.astype(np.int64)
        return known

    def keep_figure(self, i: int, j: int, known: tuple[int, np.ndarray, np.ndarray], peak: np.ndarray | None) -> None:
        """Offer the figure of ``i..j`` (and its variables peak, if kept) to the scenarios of other option sets.

        In int32 when every value fits: half the bytes. An option set alone offers nothing.
        """
        if not self._shares(i, j):
            return
        key = self._other_key(i, j)
        worst, stash, total = known
        parts = [stash, total] if peak is None else [stash, total, peak]
        small = worst < 2**31 and all(int(a.max(initial=0)) < 2**31 and int(a.min(initial=0)) >= 0 for a in parts)
        dtype = np.int32 if small else np.int64
        self.share.shared.range_figures[key] = (worst, stash.astype(dtype), total.astype(dtype),
                                                None if peak is None else peak.astype(dtype))

    def _other_key(self, i: int, j: int) -> tuple[object, ...]:
        # Under pipeline recomputation the figure also depends on where the set's re-run part splits.
        return (tuple(self._layer_keys[i:j + 1]), self.rerun_window(i, j))

    def rerun_window(self, i: int, j: int) -> tuple[int, bool] | None:
        """:func:`pipeline_rerun_window` of layers ``i..j`` (no wrapped head); None unless pipeline recomputation.

        Memoised: a range's evaluation, and the key its figure is offered and looked for by, each read it.
        """
        if not self.rerun:
            return None
        key = (i, j)
        if key not in self._rerun_windows:
            self._rerun_windows[key] = pipeline_rerun_window(self.facts, np.concatenate(self.layer_ops[i:j + 1]))
        return self._rerun_windows[key]

    def running_set(self, row_ops: list[np.ndarray] | None = None) -> RunningStage:
        """A new, empty running set (it takes the shared grids over)."""
        facts = self.facts
        cut = ForwardCut(facts, self.cut_grid) if self.cut_grid is not None else None
        return RunningStage(facts, self.grid, row_ops, cut)
