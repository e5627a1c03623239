"""What every range table of one memory engine shares, whatever its limit: the engine's range state.

A solve builds several tables on one engine (the asked budget, relaxed
budgets for a best-effort split, the fewest-IPUs search, the exit-3 hint),
and what they share (each layer's parts, the liveness grid, every range
figure already evaluated, the running sets a row stopped at) is costly to
build. The engine owns it (:meth:`popliner.memory.engine.MemoryEngine.range_state`),
one per :class:`popliner.memory.running.Pieces`, so it lives exactly as long as the engine: no cache
outside it, and a table built anywhere on the same engine reuses it.
"""

from __future__ import annotations

import weakref

import numpy as np

from popliner.memory.layer_vars import LayerVariables, SharingFacts
from popliner.memory.liveness import SegmentGrid
from popliner.memory.ranges_shared import EngineShare, SharedParts
from popliner.memory.rerun import ForwardCut, forward_cut_grid
from popliner.memory.running import LayerParts, Pieces, RunningStage

__all__ = ["RangeState"]


class RangeState:
    """Per engine (and :class:`Pieces`): what every range table of the engine can reuse.

    The engine holds it; it holds the engine only weakly, so that an engine
    no one else holds is freed at once, not when the cycle collector next
    runs (a process that tries option set after option set builds an engine
    for each). The running sets kept in :attr:`resume` do hold the engine:
    :func:`popliner.memory.ranges.release` drops them early.
    """

    def __init__(self, engine: SharingFacts, pieces: Pieces) -> None:
        self._engine = weakref.ref(engine)
        self.layer_ops = [engine.range_ops(k, k) for k in range(engine.num_layers)]
        shared = engine.shared_parts
        dtype = shared.grid_dtype(engine.profile)
        self.grid = SegmentGrid.of(engine.profile, pieces.grid_block, dtype)
        #: ``--recompute pipeline``: running sets keep their variables' forward-cut liveness too.
        self.rerun = engine.view.recompute == "pipeline"
        self.cut_grid = forward_cut_grid(engine, dtype, pieces.grid_block) if self.rerun else None
        for grid in (self.grid, self.cut_grid):
            if grid is not None:
                shared.take_buffers(grid)  # zeroed buffers an earlier engine gave back: no page faults
        self.pieces = pieces
        #: The profile's option-free parts and this engine's delta on them (``popliner plan``: one engine per
        #: option set, all on the same parts).
        self.share = EngineShare(shared, engine, self.grid, self.cut_grid)
        #: What a range's figure depends on besides its operations: engines of equal signatures share figures.
        self._signature = self.share.signature(engine)
        counted = engine.model.counted_vars
        self._layer_keys = [ops.tobytes() + counted[ops].tobytes() for ops in self.layer_ops]
        #: Per layer, what this option set makes of its variables (:meth:`EngineShare.fingerprint`).
        self._fingerprints: dict[int, bytes] = {}
        self._parts: dict[int, LayerParts] = {}
        #: Every layer's private and shared variables, found for all layers at once when the first is needed.
        self._variables: LayerVariables | None = None
        #: (i, j) -> (worst tile bytes, stash entry per tile, total per tile)
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]] = {}
        #: (i, j) -> the variables peak per tile of a range evaluated on a running set that re-runs nothing.
        self.peaks: dict[tuple[int, int], np.ndarray] = {}
        #: Ranges whose model figure the engine holds (see ProfileRanges.stage_memory).
        self.staged: set[tuple[int, int, bool]] = set()
        #: Per start: the running set where its row stopped, to grow it for a higher limit.
        self.resume: dict[int, RunningStage] = {}

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
            engine = self._engine()
            assert engine is not None  # a table holds its engine
            ops = self.layer_ops[j]
            parts = self._parts[j] = LayerParts.of(engine, ops, self.share, self._layer_variables(engine, j))
        return parts

    def _layer_variables(self, engine: SharingFacts, j: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if self._variables is None:
            self._variables = LayerVariables.of(engine)
        return self._variables.split(j, self.layer_ops[j])

    def _fingerprint(self, engine: SharingFacts, j: int) -> bytes:
        found = self._fingerprints.get(j)
        if found is None:
            private, shared, _ = self._layer_variables(engine, j)
            found = self._fingerprints[j] = self.share.fingerprint(engine, private, shared, self._layer_keys[j])
        return found

    def other_figure(self, i: int, j: int) -> tuple[int, np.ndarray, np.ndarray] | None:
        """The figure of ``i..j`` when an engine of the same variable tables and rules evaluated the same operations.

        Kept here too (in :attr:`figures`) when found.
        """
        found = self.share.shared.range_figures.get(self._other_key(i, j))
        if found is None:
            return None
        worst, stash, total, peak = found
        known = self.figures[(i, j)] = (worst, stash.astype(np.int64), total.astype(np.int64))
        if peak is not None:
            self.peaks[(i, j)] = peak.astype(np.int64)
        return known

    def keep_figure(self, i: int, j: int, known: tuple[int, np.ndarray, np.ndarray], peak: np.ndarray | None) -> None:
        """Offer the figure of ``i..j`` (and its variables peak, if kept) to the engines of other option sets.

        In int32 when every value fits: half the bytes.
        """
        key = self._other_key(i, j)
        worst, stash, total = known
        parts = [stash, total] if peak is None else [stash, total, peak]
        small = worst < 2**31 and all(int(a.max(initial=0)) < 2**31 and int(a.min(initial=0)) >= 0 for a in parts)
        dtype = np.int32 if small else np.int64
        self.share.shared.range_figures[key] = (worst, stash.astype(dtype), total.astype(dtype),
                                                None if peak is None else peak.astype(dtype))

    def _other_key(self, i: int, j: int) -> tuple[object, ...]:
        engine = self._engine()
        assert engine is not None  # a table holds its engine
        # Under pipeline recomputation the figure also depends on where the set's re-run part splits.
        rerun = engine.pipeline_rerun_window(np.concatenate(self.layer_ops[i:j + 1])) if self.rerun else None
        fingerprints = tuple(self._fingerprint(engine, k) for k in range(i, j + 1))
        return (self._signature, tuple(self._layer_keys[i:j + 1]), fingerprints, rerun)

    def running_set(self, row_ops: list[np.ndarray] | None = None) -> RunningStage:
        """A new, empty running set (it takes the shared grids over)."""
        engine = self._engine()
        assert engine is not None  # a table holds its engine
        cut = ForwardCut(engine, self.cut_grid) if self.cut_grid is not None else None
        return RunningStage(engine, self.grid, row_ops, cut, self.pieces.stash_horizon)
