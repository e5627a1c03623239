"""The running set of a range table: per-tile memory of a set of operations that grows one layer at a time.

A range ``i..j`` of layers is evaluated by adding layer ``j`` to the set of
``i..j-1`` (:class:`RunningStage`), never from scratch. What one layer adds
is the same for every range that holds it, so it is computed once
(:class:`LayerParts`) and kept by the scenario's range memo
(:mod:`popliner.memory.range_state`). Variable liveness goes through the
liveness grid (:class:`popliner.memory.liveness.SegmentGrid`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from popliner.memory.liveness import SegmentGrid
from popliner.memory.liveness.grid import BLOCK
from popliner.memory.ranges_shared import VarSet
from popliner.memory.rerun import ForwardCut
from popliner.memory.stash_row import StashRow

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.memory.ranges_shared import EngineShare

__all__ = ["PIECES", "FreshParts", "LayerParts", "Pieces", "RunningStage"]


Events = dict[str, np.ndarray]


@dataclass(frozen=True)
class Pieces:
    """The sizes a range table's running sets work in. Any sizes give the same figures, to the byte.

    ``grid_block``: segments per block of the liveness grid. Tests take small
    blocks, so that small profiles reach every branch.
    """

    grid_block: int = BLOCK


#: The sizes the commands use.
PIECES = Pieces()


@dataclass(frozen=True, eq=False)
class LayerParts:
    """What one layer adds to a range: computed once, reused by every start ``i``.

    Control code, exchange code and vertex state add up over the layer's
    programs (``additive``); ``present`` flags the (vertex type, tile) pairs
    where the layer has a vertex. Its counted variables are split into
    private ones, used by no other layer (not kept here: their events are), and ``shared`` ones, which may
    already be in a range. ``*_events`` hold each variable's grid cells and
    bytes; in training ``*_stash`` hold the columns a
    stash entry reads. The shared parts carry ``owner``, the position in
    ``shared`` of each row, so that variables already in a range are dropped.
    ``cut_*_events`` are the same variables' events on the forward-cut grid
    (``--recompute pipeline``: :mod:`popliner.memory.rerun`).
    Events and stash columns are tuples of pieces that add up (the profile's
    piece and the option set's own: :mod:`popliner.memory.ranges_shared`).
    """

    ops: np.ndarray
    additive: np.ndarray  # int64 [tiles]
    present: np.ndarray  # bool [types, tiles]
    lo: int
    hi: int
    shared: np.ndarray  # sorted variable indices
    shared_pos: np.ndarray  # their positions in facts.boundaries.multi_layer_index
    private_events: tuple[Events, ...]
    shared_events: tuple[Events, ...]
    private_stash: tuple[Events, ...] | None
    shared_stash: tuple[Events, ...] | None
    units: np.ndarray | None  # int64 [drivers, tiles] of the other categories (None: the profile has none)
    cut_private_events: tuple[Events, ...] | None = None
    cut_shared_events: tuple[Events, ...] | None = None
    #: The shared parts a range takes, by which shared variables are new to it (:class:`FreshParts`): a layer
    #: meets a few such patterns (first in its range, or after the layer before it), each kept once it is seen.
    fresh_parts: dict[bytes, FreshParts] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, facts: MemoryFacts, ops: np.ndarray, share: EngineShare,
           variables: tuple[np.ndarray, np.ndarray, np.ndarray], sets: tuple[VarSet, VarSet] | None = None
           ) -> LayerParts:
        """The layer's parts: the profile's option-free parts (``share``, with its grids) and the option set's own.

        ``variables``: its (private, shared) counted variables and the shared
        ones' positions in ``multi_layer_index``
        (:meth:`popliner.memory.layer_vars.LayerVariables.split`); ``sets``: the
        same two sets of variables as :class:`VarSet`, when the caller has them.
        """
        additive, present, units, lo, hi = share.shared.programs(facts, ops)
        private, shared, shared_pos = variables
        # Each variable set's key, columns and split once, for its events and stash columns.
        if sets is None:
            sets = (VarSet(share.shared, private), VarSet(share.shared, shared))
        # The stash columns first: their sums per class, candidates apart, give the grid's change its own.
        stash = share.stash(sets[0]), share.stash(sets[1], with_owner=True)
        events = share.grid.merged(sets[0]), share.grid.owned(sets[1])
        cut_grid = share.cut_grid
        cut = (None, None) if cut_grid is None else (cut_grid.merged(sets[0]), cut_grid.owned(sets[1]))
        return cls(ops, additive, present, lo, hi, shared, shared_pos, events[0], events[1], stash[0],
                   stash[1], units, cut[0], cut[1])

    def fresh(self, fresh: np.ndarray, grid: SegmentGrid, cut_grid: SegmentGrid | None) -> FreshParts:
        """The shared parts a range takes when ``fresh`` (per shared variable) flags those new to it, on the range
        state's grids: made at the pattern's first use and kept here (:attr:`fresh_parts`)."""
        key = fresh.tobytes()
        found = self.fresh_parts.get(key)
        if found is None:
            found = self.fresh_parts[key] = FreshParts.of(self, fresh, grid, cut_grid)
        return found


@dataclass(frozen=True)
class FreshParts:
    """A layer's shared variables new to a range: their net change on the grid and on the forward-cut grid
    (``--recompute pipeline``), and their stash columns (training).

    Those of a range the layer does not start are merged (:meth:`SegmentGrid.net_change`): an indexed add of
    distinct cells (or rows) instead of a scatter of every variable's events at each range that takes them. All the
    shared variables are new to a range the layer starts, a pattern met about once per row: the layer's own events
    serve, at no merge.
    """

    events: tuple[Events, ...]
    cut_events: tuple[Events, ...] | None
    stash: tuple[Events, ...] | None

    @classmethod
    def of(cls, parts: LayerParts, fresh: np.ndarray, grid: SegmentGrid, cut_grid: SegmentGrid | None
           ) -> FreshParts:
        cut = None if cut_grid is None else parts.cut_shared_events
        stash = parts.shared_stash
        if fresh.all():
            return cls(parts.shared_events, cut, stash)
        return cls(_merged(grid, _pieces_of(parts.shared_events, fresh)),
                   None if cut is None or cut_grid is None else _merged(cut_grid, _pieces_of(cut, fresh)),
                   None if stash is None else _pieces_of(stash, fresh))


class RunningStage:
    """Running per-tile memory of a growing set of operations.

    Control code, exchange code and vertex state add up; the (vertex type, tile)
    pairs with a vertex only grow. Variable liveness goes into the dense
    (liveness segment x tile) grid, which the scenario's running sets share
    one at a time. In training, ``row_ops`` are the operations of
    the layers the set may grow by, in order (the first is the first layer
    added), and the stash columns of each layer's new variables are kept: see
    :class:`StashRow`. ``forward_cut``,
    under ``--recompute pipeline``, keeps the set's variables under the
    forward-cut live steps too (:meth:`rerun_variables_peak`).
    """

    def __init__(self, facts: MemoryFacts, grid: SegmentGrid, row_ops: list[np.ndarray] | None = None,
                 forward_cut: ForwardCut | None = None) -> None:
        self.facts = facts
        p = facts.profile
        self.tiles = p.tiles
        self.additive = np.zeros(self.tiles, np.int64)
        self.code = facts.model.code_by_type
        # The (vertex type, tile) pairs where the set has a vertex, and the code bytes of those pairs per tile:
        # grown by the pairs a layer adds that the set lacks, not summed again over every pair at each reading.
        self.present = np.zeros(self.code.shape, bool)
        self.code_bytes = np.zeros(self.tiles, np.int64)
        self.categories = facts.model.categories
        self.units = np.zeros_like(self.categories.whole) if self.categories is not None else None
        # Only variables several layers use can be in the set already: marked by their compact number.
        self.in_set = np.zeros(len(facts.boundaries.multi_layer_index), bool)
        self.grid = grid
        grid.clear()
        # The grid names its holder by a token, not the set itself: no reference cycle keeps a set (and the facts
        # it holds, hundreds of MB on a large profile) alive once its table is done with it.
        self._token = object()
        grid.owner = self._token
        self.lo, self.hi = 0, -1
        self.ops: list[np.ndarray] = []
        self.stash = StashRow(facts, row_ops) if row_ops is not None else None
        #: What went into the shared grid, to put the set back after other sets used it: each layer's parts and
        #: which of its shared variables were new to the set (not the filtered events: a plan keeps a set per row).
        self.grid_adds: list[tuple[LayerParts, np.ndarray]] = []
        self.forward_cut = forward_cut

    @property
    def holds_grids(self) -> bool:
        """Do the shared grids hold this set's variables (no other set cleared them since)?"""
        return self.grid.owner is self._token and (
            self.forward_cut is None or self.forward_cut.holds_grid)

    def restore_grid(self) -> None:
        """Make the shared grids hold this set's variables again (other sets clear them)."""
        self.grid.clear()
        self.grid.owner = self._token
        for parts, fresh in self.grid_adds:
            for events in (*parts.private_events, *self._fresh_parts(parts, fresh).events):
                self.grid.add(events)
        if self.forward_cut is not None:
            self.forward_cut.restore()

    def add(self, parts: LayerParts, kept: np.ndarray | None = None) -> None:
        """Add a layer; ``kept``: its private variables, when its variables keep their live steps in the forward-cut
        liveness (a wrapped head's)."""
        self.ops.append(parts.ops)
        self.additive += parts.additive
        new = parts.present & ~self.present
        if new.any():
            self.present |= new
            self.code_bytes += (self.code * new).sum(axis=0)
        if self.units is not None and parts.units is not None:
            self.units += parts.units
        lo, hi = parts.lo, parts.hi
        if hi >= lo:
            self.lo, self.hi = (lo, hi) if self.hi < self.lo else (min(self.lo, lo), max(self.hi, hi))
        fresh = ~self.in_set[parts.shared_pos]
        self.in_set[parts.shared_pos] = True
        taken = self._fresh_parts(parts, fresh)
        cut = self.forward_cut
        if cut is not None:
            # A kept head's new variables, sorted: their forward-cut events are made from them.
            var = None if kept is None else np.sort(np.concatenate((kept, parts.shared[fresh])))
            cut.add(parts.cut_private_events, taken.cut_events, var, kept is not None)
        for events in (*parts.private_events, *taken.events):
            self.grid.add(events)
        self.grid_adds.append((parts, fresh))
        if self.stash is not None and parts.private_stash is not None and taken.stash is not None:
            for cols in (*parts.private_stash, *taken.stash):
                self.stash.add(cols)

    def _fresh_parts(self, parts: LayerParts, fresh: np.ndarray) -> FreshParts:
        """The layer's shared parts new to the set (``fresh``: per shared variable)."""
        return parts.fresh(fresh, self.grid, None if self.forward_cut is None else self.forward_cut.grid)

    def total_per_tile(self, variables: np.ndarray | None = None) -> np.ndarray:
        """Every component summed per tile; ``variables``: the variables peak when not :meth:`variables_peak`."""
        total = self.additive + self.code_bytes + (self.variables_peak() if variables is None else variables)
        if self.categories is not None and self.units is not None:
            total = total + self.categories.per_tile(self.units)
        return np.asarray(total)

    def variables_peak(self) -> np.ndarray:
        """Per tile, the most bytes of the set's variables live at once in its window."""
        return self.grid.peak(self.lo, self.hi)

    def rerun_variables_peak(self, b0: int) -> np.ndarray:
        """A re-run stage's variables peak: the forward-cut window before step ``b0``, the backward from it.

        ``b0`` is :func:`popliner.memory.stages.pipeline_rerun_window`'s
        for the set's operations; the same figure as :func:`popliner.memory.stages.stage_memory`'s, to the byte.
        """
        assert self.forward_cut is not None  # built for pipeline recomputation
        return np.asarray(np.maximum(self.forward_cut.peak(self.lo, b0 - 1), self.grid.peak(b0, self.hi)))

    def stash_entry(self) -> np.ndarray:
        """:func:`popliner.memory.stages.stash_entry_per_tile` of the set so far (training)."""
        assert self.stash is not None  # built with the row's operations in training
        return self.stash.entry(len(self.ops) - 1)



def _merged(grid: SegmentGrid, pieces: tuple[Events, ...]) -> tuple[Events, ...]:
    """Pieces of events (start and end cells, bytes) as one net change of ``grid`` (other pieces as they are)."""
    events = [p for p in pieces if "nbytes" in p]
    if not grid.tiles or not events:
        return pieces
    tiles = grid.tiles
    start, end = (np.concatenate([p[name].astype(np.int64) for p in events]) for name in ("start", "end"))
    nbytes = np.concatenate([p["nbytes"].astype(np.int64) for p in events])
    merged = grid.net_change(start // tiles, end // tiles, start % tiles, nbytes)
    return (*(p for p in pieces if "nbytes" not in p), merged)


def _pieces_of(pieces: tuple[Events, ...], fresh: np.ndarray) -> tuple[Events, ...]:
    """Each piece's rows whose owner variable is fresh."""
    if fresh.all():  # read only: the layer's own rows serve (no gather of the owners)
        return pieces
    return tuple(_rows_of(cols, fresh) for cols in pieces)


def _rows_of(cols: dict[str, np.ndarray], fresh: np.ndarray) -> dict[str, np.ndarray]:
    """The rows whose owner variable is fresh (not yet in the range)."""
    # The positions once: a boolean mask would be scanned again by every column.
    keep = np.flatnonzero(fresh[cols["owner"]])
    if keep.size == len(cols["owner"]):  # read only: the layer's own rows serve
        return cols
    return {name: col[keep] for name, col in cols.items()}
