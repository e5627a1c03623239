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

Between scenarios, when their base shares (``popliner plan``): figures of ranges that other option sets treat
alike (:mod:`popliner.memory.figure_share`), and the on-chip figures an off-chip option set offers the on-chip one
of the same recomputation and layering (:class:`StateFigures`).
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import content_key
from popliner.memory.facts import MemoryFacts
from popliner.memory.figure_share import TableView, layers_touched
from popliner.memory.layer_vars import LayerVariables
from popliner.memory.liveness import SegmentGrid
from popliner.memory.ranges_shared import EngineShare, SharedParts, VarSet
from popliner.memory.rerun import ForwardCut, forward_cut_grid
from popliner.memory.running import LayerParts, Pieces, RunningStage
from popliner.memory.stages import pipeline_rerun_window, range_ops

__all__ = ["RangeMemo", "RangeState", "StateFigures", "share_state_figures"]

#: Where a base's shared parts keep the on-chip figures an off-chip option set offers (:func:`share_state_figures`).
_STATE_FIGURES = b"state-figures"


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


class StateFigures:
    """The on-chip figures of an off-chip option set's ranges, for the on-chip option set of the same
    recomputation and layering (``popliner plan`` plans the off-chip option sets of a recomputation first).

    Off chip the optimizer state is live only around its own update; on chip it is always live; every other
    variable has the same live steps and bytes in both, and the state is no stash candidate on chip (always live)
    nor, in these ranges, off chip (live only after the forward part). So the on-chip figure of a range is the
    off-chip one with the state's live bytes taken out of the variables peak and its bytes per tile put in
    (:meth:`popliner.memory.running.RunningStage.on_chip_peak`): the off-chip set reads it on the same running set,
    while the on-chip figure is within the limit (and the first over it). The on-chip set checks the variables
    alike (:mod:`popliner.memory.figure_share`) and takes the figures of the ranges whose layers it treats so; it
    evaluates any other range itself.

    ``key``: the offering set's signature and layers (operations and counted flags); ``view``: what its figures
    read of its variables; ``state``: its optimizer state (bool per variable), ``nbytes`` the variables' bytes.
    """

    def __init__(self, key: tuple[object, ...], view: TableView, state: np.ndarray, nbytes: np.ndarray) -> None:
        self.key = key
        self.view = view
        self.state = state
        self.nbytes = nbytes
        #: (i, j) -> (worst tile bytes, stash entry per tile, total per tile, variables peak per tile), on chip.
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray, np.ndarray]] = {}


class _StateShelf:
    """The offered figures of one recomputation at a time (the first off-chip option set's), until taken."""

    def __init__(self) -> None:
        self.offered: StateFigures | None = None


def share_state_figures(shared: SharedParts) -> None:
    """Have the off-chip option sets built on ``shared`` from now on offer their on-chip figures
    (:class:`StateFigures`): for a caller that builds both states of a recomputation, the off-chip one first
    (``popliner plan``). Sharing must be on (:meth:`SharedParts.share_between_option_sets`). An offer an earlier
    caller left (no on-chip set took it) goes."""
    shared.view_memo[_STATE_FIGURES] = _StateShelf()


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
        #: Off chip: the on-chip figures this state offers, if it does (:class:`StateFigures`).
        self.offered = self._offer()
        #: On chip: the figures an off-chip state offered these layers, and per layer whether it takes them (found
        #: when first read).
        self._taken: tuple[StateFigures, np.ndarray] | None = None
        self._looked = False

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
            state = None if self.offered is None else self.offered.state
            parts = self._parts[j] = LayerParts.of(self.facts, self.layer_ops[j], self.share, variables, sets, state)
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
        """The figure of ``i..j`` when a scenario of the same variable tables and rules evaluated the same operations,
        or when the off-chip option set of the same recomputation and layers offered it (:class:`StateFigures`; then
        offered in turn to the option sets of this one's group).

        Kept here too (in :attr:`figures`) when found. None for an option set alone (no other shares its parts).
        """
        found = self.share.shared.range_figures.get(self._other_key(i, j)) if self._shares(i, j) else None
        if found is None:
            found = self._state_figure(i, j)
            if found is None:
                return None
            self._keep(i, j, found[:3], found[3])
        worst, stash, total, peak = found
        known = self.figures[(i, j)] = (worst, stash.astype(np.int64), total.astype(np.int64))
        if peak is not None:
            self.peaks[(i, j)] = peak.astype(np.int64)
        return known

    def offer_on_chip(self, i: int, j: int, state: RunningStage, b0: int | None,
                      known: tuple[int, np.ndarray, np.ndarray], peak: np.ndarray) -> int | None:
        """Offer the on-chip figure of ``i..j``, just evaluated off chip on ``state`` (``known``, with its variables
        peak ``peak``; ``b0``: a re-run set's backward start): its worst tile, or None when not offered (a stash
        entry of the range could hold some of the state off chip)."""
        assert self.offered is not None
        if self.facts.training and not state.stash_holds_no_state():
            return None
        on_chip = state.on_chip_peak(b0)
        total = known[2] - peak + on_chip  # the other components are the same
        worst = int(total.max())
        self.offered.figures[(i, j)] = (worst, known[1], total, on_chip)
        return worst

    def on_chip_open(self, i: int, j: int, limit: float) -> bool:
        """Does the row of ``i`` offer ``i..j`` on chip: the first, or its range before was offered within
        ``limit`` (the on-chip table reads no further than the first over its limit)?"""
        if self.offered is None:
            return False
        if j == i:
            return True
        before = self.offered.figures.get((i, j - 1))
        return before is not None and before[0] <= limit

    def _offer(self) -> StateFigures | None:
        """Off chip, when asked for (:func:`share_state_figures`): the on-chip figures to offer, unless an off-chip
        state of the same recomputation offers its own already (one a recomputation: gigabytes kept otherwise)."""
        facts = self.facts
        shelf: _StateShelf | None = self.share.shared.view_memo.get(_STATE_FIGURES)
        if (shelf is None or not self.share.shares or not facts.training
                or facts.view.options.optimizer_state != "off-chip"):
            return None
        state = np.asarray(facts.view.optimizer_state, bool)
        if not state.any() or (shelf.offered is not None and shelf.offered.key[0] == self._signature):
            return None
        shelf.offered = StateFigures(self._state_key(), self.share.view(self._signature), state,
                                     facts.profile.variables.bytes)
        return shelf.offered

    def _state_key(self) -> tuple[object, ...]:
        return (self._signature, tuple(self._layer_keys))

    def _state_figure(self, i: int, j: int) -> tuple[int, np.ndarray, np.ndarray, np.ndarray | None] | None:
        """The on-chip figure of ``i..j`` an off-chip state offered, when this state's layers take it."""
        if not self._looked:
            self._looked = True
            self._taken = self._take_offer()
        if self._taken is None:
            return None
        offered, alike = self._taken
        if not alike[i:j + 1].all():
            return None
        return offered.figures.get((i, j))

    def _take_offer(self) -> tuple[StateFigures, np.ndarray] | None:
        """On chip: the figures the off-chip state of the same recomputation and layers offered (taken off the
        shelf: they go with this state), and per layer whether it takes them."""
        facts = self.facts
        shelf: _StateShelf | None = self.share.shared.view_memo.get(_STATE_FIGURES)
        if (shelf is None or shelf.offered is None or not self.share.shares or not facts.training
                or facts.view.options.optimizer_state != "on-chip" or shelf.offered.key != self._state_key()):
            return None
        offered = shelf.offered
        shelf.offered = None
        alike = self._alike_off_chip(offered)
        return None if alike is None or not alike.any() else (offered, alike)

    def _alike_off_chip(self, offered: StateFigures) -> np.ndarray | None:
        """Per layer: are its variables, the offered state aside, treated as the off-chip state does, and that state
        always live here (on the forward-cut grid too) with the same bytes? None when no layer is."""
        differs = self.share.view(self._signature).differs(offered.view)
        if differs is None:
            return None
        at = np.flatnonzero(offered.state)
        facts = self.facts
        nbytes = facts.profile.variables.bytes
        if not np.take(facts.always_live_var, at).all() or (
                nbytes is not offered.nbytes and not np.array_equal(np.take(nbytes, at), np.take(offered.nbytes, at))):
            return None
        if self.cut_grid is not None:
            cut = self.cut_grid.p
            if not cut.always_live_classes()[np.take(cut.variables.klass, at)].all():
                return None
        differs[at] = False
        if not differs.any():
            return np.ones(len(self.layer_ops), bool)
        v = self._layer_variables()
        return ~layers_touched(differs, v.starts, v.lengths, v.ptr,
                               [v.shared_of(k, ops) for k, ops in enumerate(self.layer_ops)])

    def keep_figure(self, i: int, j: int, known: tuple[int, np.ndarray, np.ndarray], peak: np.ndarray | None) -> None:
        """Offer the figure of ``i..j`` (and its variables peak, if kept) to the scenarios of other option sets.

        In int32 when every value fits: half the bytes. An option set alone offers nothing.
        """
        self._keep(i, j, known, peak)

    def _keep(self, i: int, j: int, known: tuple[int, np.ndarray, np.ndarray], peak: np.ndarray | None) -> None:
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

    def running_set(self, row_ops: list[np.ndarray] | None = None, offer: bool = False) -> RunningStage:
        """A new, empty running set (it takes the shared grids over); ``offer``: one whose on-chip figures this
        state offers (it keeps its optimizer state apart)."""
        facts = self.facts
        cut = ForwardCut(facts, self.cut_grid) if self.cut_grid is not None else None
        return RunningStage(facts, self.grid, row_ops, cut, state=offer and self.offered is not None)
