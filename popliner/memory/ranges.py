"""The incremental range engine: per-tile memory of every contiguous layer range, grown one layer at a time.

A stage is a contiguous range ``i..j`` of layers (in layer order); the first
stage also holds the operations without a layer, as PopLiner did. A stage's
memory is the memory model applied to all its operations, never the sum of
its layers' figures (code is shared, liveness peaks do not add up), so the
table evaluates ranges: for each start ``i`` it extends ``j`` one layer at a
time, adding the new layer's programs and variables to running state, and
stops once the range no longer fits the largest budget of interest (memory
only grows as a range grows).

The figures are the same as :meth:`popliner.memory.engine.MemoryEngine.stage_memory`
and :meth:`~popliner.memory.engine.MemoryEngine.stash_entry_per_tile` of the
range's operations, to the byte (a property test holds the two against each
other on every fixture, with both liveness paths).

Liveness has two paths: a dense (tile x liveness segment) grid when the
profile has few distinct interval ends, else a sorted event list. ``liveness``
forces one (``"grid"`` or ``"events"``); ``"auto"`` picks by size.

:class:`ProfileRanges` offers what a solver reads (see
:class:`popliner.pipeline.RangeCosts`); the pipeline rules (stash depth, copy
buffers) are applied by :mod:`popliner.pipeline`, not here.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Literal

import numpy as np

from popliner.arrays import expand_ranges, rank_by_table, unique_inverse
from popliner.deadline import check_deadline
from popliner.memory.engine import MemoryEngine, StashWindows
from popliner.memory.types import StageMemory
from popliner.memory.work import check_range_tables
from popliner.profile.model import Profile

__all__ = ["OVERFLOW", "Liveness", "ProfileRanges", "release"]

#: A range that does not fit (or was not evaluated because a shorter one did not).
OVERFLOW = math.inf
#: Which liveness path the running stages use.
Liveness = Literal["auto", "grid", "events"]


class ProfileRanges:
    """The range table of a profile's memory engine, evaluated lazily and memoised.

    ``limit`` is the largest worst-tile figure of interest: a range over it
    reads as :data:`OVERFLOW`, and no longer range from the same start is
    evaluated. Tables of the same engine (a solve builds several: the asked
    budget, relaxed budgets for a best-effort split) share what does not
    depend on the limit: per-layer parts, crossing bytes and every range
    figure already evaluated, so a second table only evaluates ranges the
    first did not.

    ``deadline`` (a ``time.monotonic()`` value, or None) bounds the work of
    extending a row: past it, reading a range not evaluated yet raises
    :class:`popliner.deadline.OutOfTime`. What was evaluated before stays
    memoised and correct, so a solver can still read it after clearing the
    deadline (set the attribute to None).

    ``lazy`` extends a row only as far as it is read (``i..j`` evaluates
    ``i..i`` to ``i..j`` and no further), for a solver that reads rows in
    order and knows where to stop; reading the row further grows its
    running set from where it stopped. Figures are the same either way.
    """

    def __init__(self, engine: MemoryEngine, limit: int, link_bytes_per_second: float = 64e9,
                 liveness: Liveness = "auto", deadline: float | None = None, lazy: bool = False) -> None:
        self.engine = engine
        self.limit = limit
        # A wrapped head is no layer the solvers place: it goes with the range at position 0.
        self._wraps = engine.layout.wraps
        self._names = engine.layout.placed_names
        check_range_tables(engine.profile, len(self._names))  # before any row is built
        self._wrapped: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
        self._bytes_per_cycle = link_bytes_per_second / engine.profile.target.clock_hz
        self._training = engine.training
        self._ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._done_from: set[int] = set()
        self._memory: dict[tuple[int, int, int], float] = {}
        self._shared = _Shared.of(engine, liveness)
        self._layer_cycles = engine.layer_cycles
        self._cross = engine.crossing
        self._cycles: dict[tuple[int, int], int] = {}
        self._has_cycles: bool | None = None
        self.deadline = deadline
        self.lazy = lazy
        #: The row a lazy table extended last, with the event list (no grid): (start, its running set).
        self._open: tuple[int, _RunningStage] | None = None

    # -- what a solver reads ------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return len(self._names)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def tiles(self) -> int:
        return self.engine.tiles

    @property
    def training(self) -> bool:
        return self._training

    @property
    def has_unlayered(self) -> bool:
        return self.engine.has_unlayered

    @property
    def has_cycles(self) -> bool:
        # Read for every range cost a solver takes: the engine's answer, once.
        if self._has_cycles is None:
            self._has_cycles = self.engine.has_cycles
        return self._has_cycles

    @property
    def head_wraps(self) -> bool:
        return self._wraps

    @property
    def liveness(self) -> Literal["grid", "events"]:
        """The liveness path this table's running stages take."""
        return self._shared.liveness

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        """Worst-tile bytes of the range with ``extra_stash`` stash entries beyond the profile's one.

        :data:`OVERFLOW` when over the limit; then every longer range from
        ``i`` overflows too. Copy buffers are not included: see
        :func:`popliner.pipeline.position_memory`.
        """
        key = (i, j, extra_stash)
        found = self._memory.get(key)
        if found is None:
            # The solvers ask for the same (range, depth) many times: every stage count of the DP,
            # the fewest-IPUs search and the ILP's edges read it again.
            entry = self._wrapped_range(j) if self._wraps and i == 0 else self._range(i, j)
            if entry is None:
                found = OVERFLOW
            else:
                total, stash = entry
                worst = int((total + extra_stash * stash).max()) if extra_stash else int(total.max())
                found = worst if worst <= self.limit else OVERFLOW
            self._memory[key] = found
        return found

    def compute(self, i: int, j: int) -> int:
        """Cycles of one micro-batch through the range (a wrapped head's with the range at position 0)."""
        found = self._cycles.get((i, j))
        if found is None:  # the DP and the ILP's edges ask for each range many times
            found = self._cycles[(i, j)] = self.engine.range_cycles(i, j, with_head=self._wraps and i == 0)
        return found

    def crossing(self, j: int) -> int:
        # After the last layer placed: 0, or what a wrapped head receives.
        return int(self._cross[j]) if 0 <= j < len(self._cross) else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bytes_per_cycle) if nbytes else 0

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        """Boundaries inside the span of an always-live variable several layers use (when asked).

        A wrapped head is on IPU 0: a variable it shares with layer ``a``
        keeps layers ``0..a`` on IPU 0.
        """
        if not keep_shared_together:
            return frozenset()
        forbidden: set[int] = set()
        for a, b in self.engine.always_live_spans:
            if self._wraps and b == self.engine.head_layer:
                forbidden.update(range(0, a))
            else:
                forbidden.update(range(a, b))
        return frozenset(forbidden)

    # -- per-tile figures ---------------------------------------------------------

    def per_tile(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(total per tile, one stash entry per tile) of the range, incrementally; None if over the limit."""
        return self._range(i, j)

    def stage_ops(self, i: int, j: int) -> np.ndarray:
        """Operations of the range's IPU (a wrapped head's with the range at position 0)."""
        ops = self.engine.range_ops(i, j)
        if self._wraps and i == 0:
            ops = np.union1d(ops, self.engine.range_ops(self.engine.head_layer, self.engine.head_layer))
        return ops

    def stage_memory(self, i: int, j: int) -> StageMemory:
        """The direct model's figure of the range (memoised by the engine).

        The engine also keeps the range's stash entry when the table has it.
        Its variables peak comes from the running set of the range's layers
        (a few layer additions and one reading of the liveness grid) rather
        than from a sweep over all the range's variable intervals: the same
        figure, to the byte (tests/test_range_paths.py).
        """
        ops = self.stage_ops(i, j)
        wrapped = self._wraps and i == 0  # with the head's operations too
        known = self._shared.figures.get((i, j))
        if known is not None and self._training and not wrapped:
            self.engine.remember_stash_entry(ops, known[1])  # the same figure (tests/test_memory_engine.py)
        key = (i, j, wrapped)
        if key in self._shared.staged:
            return self.engine.stage_memory(ops)
        state = _RunningStage(self.engine, self._shared.grid)
        for k in [*range(i, j + 1), *([self.engine.head_layer] if wrapped else [])]:
            state.add(self._shared.layer_parts(k))
        self._shared.staged.add(key)
        return self.engine.stage_memory(ops, variables=state.variables_peak())

    # -- incremental evaluation -----------------------------------------------

    def _range(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        if i not in self._done_from and not (self.lazy and (i, j) in self._ranges):
            self._extend_from(i, j if self.lazy else self.num_layers - 1)
        return self._ranges.get((i, j))

    def _wrapped_range(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(total per tile, stash entry per tile) of range ``0..j`` with the wrapped head; None over the limit.

        The total is the model of the union of both stages' operations; the
        stash entry is the range's alone (the head stashes nothing).
        """
        if self._wrapped is None:
            wrapped: dict[int, tuple[np.ndarray, np.ndarray]] = {}
            # The plain ranges first: they give the stash entries and use the shared grid themselves.
            plain = [self._range(0, k) for k in range(self.num_layers)]
            state = _RunningStage(self.engine, self._shared.grid)
            state.add(self._shared.layer_parts(self.engine.head_layer))
            for k, entry in enumerate(plain):
                if entry is None:
                    break  # the range alone is over the limit: with the head too
                check_deadline(self.deadline)
                state.add(self._shared.layer_parts(k))
                total = state.total_per_tile()
                if self.engine.view.recompute == "pipeline":  # IPU 0's first stage is re-run: the engine's figure
                    total = self.engine.stage_memory(self.stage_ops(0, k)).total_per_tile
                if int(total.max()) > self.limit:
                    break
                wrapped[k] = (total, entry[1])
            self._wrapped = wrapped  # only once complete: an interrupted pass leaves nothing half-built
        return self._wrapped.get(j)

    def _extend_from(self, i: int, upto: int) -> None:
        """Evaluate ``i..j`` for growing ``j`` up to ``upto`` or until the range overflows the limit."""
        shared = self._shared
        state: _RunningStage | None = None
        for j in range(i, upto + 1):
            known = shared.figures.get((i, j))
            if known is None:
                # One clock reading per layer added: noise next to the per-tile sums below.
                check_deadline(self.deadline)
                if state is None:
                    state = self._running_set(i, j)
                state.add(shared.layer_parts(j))
                total = state.total_per_tile()
                if self.engine.view.recompute == "pipeline" and j < self.engine.num_layers - 1:
                    # Recomputed from the stash when its backward starts: a figure of the whole stage.
                    total = self.engine.stage_memory(self.engine.range_ops(i, j)).total_per_tile
                # Same figure as the engine's stash_entry_per_tile, from the running set of variables. Taken
                # over the limit too: a table with a higher limit (a best effort) then needs no second
                # reading of this range's total, only the running set to grow it further.
                stash = state.stash_entry() if self._training else np.zeros_like(total)
                known = shared.figures[(i, j)] = (int(total.max()), stash, total)
            elif state is not None:
                check_deadline(self.deadline)
                state.add(shared.layer_parts(j))
            worst, stash, total = known
            if worst > self.limit:
                break  # memory only grows with j: no longer range fits either
            self._ranges[(i, j)] = (total, stash)
        else:
            if upto < self.num_layers - 1:  # a lazy read: the row goes on when read further
                self._keep(i, state)
                return
        if state is not None and state.grid is not None:
            # A table with a higher limit (a best effort) grows the row further from here. With the
            # event list the set holds every event of the range: it is rebuilt instead.
            shared.resume[i] = state
        # Only once the row is complete: a row interrupted by the deadline is extended again when read.
        self._done_from.add(i)

    def _keep(self, i: int, state: _RunningStage | None) -> None:
        """Keep the running set of a row a lazy read stopped, to grow it when the row is read further."""
        if state is None:
            return
        if state.grid is not None:
            self._shared.resume[i] = state
        else:
            self._open = (i, state)  # one at a time: with the event list each set holds all its events

    def _running_set(self, i: int, j: int) -> _RunningStage:
        """The running set of layers ``i..j-1``: the one a lower limit's table left, else rebuilt."""
        shared = self._shared
        # Taken out while it grows: a row interrupted by the deadline leaves none half-grown behind.
        state = shared.resume.pop(i, None)
        if state is None and self._open is not None and self._open[0] == i:
            state = self._open[1]
        self._open = None
        if state is not None and i + len(state.ops) <= j:
            if state.grid is not None and state.grid.owner is not state:
                state.restore_grid()  # another set used the grid since: put this one back
        else:
            row = shared.layer_ops[i:] if self._training else None
            state = _RunningStage(self.engine, shared.grid, row)
        for k in range(i + len(state.ops), j):  # figures known: grow the running set only
            check_deadline(self.deadline)
            state.add(shared.layer_parts(k))
        return state


def release(engine: MemoryEngine) -> None:
    """Forget what the range tables of ``engine`` share, for a caller done with the engine.

    The running sets kept to grow a row further hold the engine, so the
    weak-keyed map alone never lets an engine go once a row was resumed:
    a process that builds engine after engine (one per training option
    set) would keep them all.
    """
    _Shared._by_engine.pop(engine, None)


class _Shared:
    """Per engine and liveness path: what every range table of it can reuse, whatever its limit.

    Held in a weak-keyed map, so it goes when the engine goes; it keeps no
    reference to the engine itself (that would keep the key alive).
    """

    _by_engine: weakref.WeakKeyDictionary[MemoryEngine, dict[str, _Shared]] = weakref.WeakKeyDictionary()

    def __init__(self, engine: MemoryEngine, grid: _SegmentGrid | None) -> None:
        self.layer_ops = [engine.range_ops(k, k) for k in range(engine.num_layers)]
        self.grid = grid
        self.liveness: Literal["grid", "events"] = "grid" if grid is not None else "events"
        self._parts: dict[int, _LayerParts] = {}
        self._engine = weakref.ref(engine)
        #: (i, j) -> (worst tile bytes, stash entry per tile, total per tile)
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray, np.ndarray]] = {}
        #: Ranges whose model figure the engine holds (see ProfileRanges.stage_memory).
        self.staged: set[tuple[int, int, bool]] = set()
        #: Per start: the running set where its row stopped (grid path), to grow it for a higher limit.
        self.resume: dict[int, _RunningStage] = {}

    @classmethod
    def of(cls, engine: MemoryEngine, liveness: Liveness) -> _Shared:
        per_path = cls._by_engine.get(engine)
        if per_path is None:
            per_path = cls._by_engine[engine] = {}
        if liveness == "auto":
            liveness = "grid" if _SegmentGrid.fits(engine.profile) else "events"
        found = per_path.get(liveness)
        if found is None:
            grid = _SegmentGrid.of(engine.profile) if liveness == "grid" else None
            found = per_path[liveness] = cls(engine, grid)
        return found

    def layer_parts(self, j: int) -> _LayerParts:
        """What layer ``j`` adds to any range holding it (memoised: every start reuses it)."""
        parts = self._parts.get(j)
        if parts is None:
            engine = self._engine()
            assert engine is not None  # a table holds its engine
            parts = self._parts[j] = _LayerParts.of(engine, self.layer_ops[j], self.grid)
        return parts


@dataclass(frozen=True, eq=False)
class _LayerParts:
    """What one layer adds to a range: computed once, reused by every start ``i``.

    Control code, exchange code and vertex state add up over the layer's
    programs (``additive``); ``presence`` is the layer's difference array of
    vertex instances per (type, tile). Its counted variables are split into
    ``private`` ones, used by no other layer, and ``shared`` ones, which may
    already be in a range. With a liveness grid, ``*_events`` hold each
    variable's grid cells and bytes; in training ``*_stash`` hold the columns a
    stash entry reads. The shared parts carry ``owner``, the position in
    ``shared`` of each row, so that variables already in a range are dropped.
    """

    ops: np.ndarray
    additive: np.ndarray  # int64 [tiles]
    presence: np.ndarray  # int64 [types, tiles + 1]
    lo: int
    hi: int
    private: np.ndarray  # sorted variable indices
    shared: np.ndarray  # sorted variable indices
    shared_pos: np.ndarray  # their positions in engine.multi_layer_index
    private_events: dict[str, np.ndarray] | None
    shared_events: dict[str, np.ndarray] | None
    private_stash: dict[str, np.ndarray] | None
    shared_stash: dict[str, np.ndarray] | None
    units: np.ndarray | None  # int64 [drivers, tiles] of the other categories (None: the profile has none)

    @classmethod
    def of(cls, engine: MemoryEngine, ops: np.ndarray, grid: _SegmentGrid | None) -> _LayerParts:
        p = engine.profile
        progs = p.programs
        tiles = p.tiles
        model = engine.model
        prog = engine.ops.programs_of_set(ops)
        additive = progs.control.sum_rows(prog[model.leaf[prog]], tiles)
        additive += progs.exchange.sum_rows(prog[model.exchange[prog]], tiles)
        presence = np.zeros((len(p.vertex_types.names), tiles + 1), np.int64)
        runs = progs.vertices.runs_of(prog)
        if runs.size:
            assert progs.vertices.key is not None  # the loader always keys vertex counts by type
            vtype = progs.vertices.key[runs].astype(np.int64)
            additive += progs.vertices.sum_runs(runs, tiles, weights=p.vertex_types.size[vtype])
            np.add.at(presence, (vtype, progs.vertices.first[runs]), 1)
            np.add.at(presence, (vtype, progs.vertices.stop[runs]), -1)
        lo, hi = model.window(ops)
        var = model.counted_variables(ops)
        multi = engine.multi_layer_var[var]
        private, shared = var[~multi], var[multi]
        return cls(ops, additive, presence, lo, hi, private, shared,
                   np.searchsorted(engine.multi_layer_index, shared),
                   grid.merged(private) if grid is not None else None,
                   grid.events_of(shared, with_owner=True) if grid is not None else None,
                   _stash_columns(engine, private), _stash_columns(engine, shared, with_owner=True),
                   model.categories.units(p, prog) if model.categories is not None else None)


def _stash_columns(engine: MemoryEngine, var: np.ndarray, with_owner: bool = False) -> dict[str, np.ndarray] | None:
    """What a stash entry reads of each variable that is not always live (training only)."""
    if not engine.training:
        return None
    keep = np.flatnonzero(engine.stash_candidate[var])  # the others are never part of a stash entry
    sv = var[keep]
    v = engine.profile.variables
    cols = {"first": engine.var_first_step[sv], "last": engine.var_last_step[sv], "tile": v.tile[sv],
            "nbytes": v.bytes[sv]}
    if with_owner:
        cols["owner"] = keep
        return cols
    return _grouped(cols, engine.tiles)


def _grouped(cols: dict[str, np.ndarray], tiles: int) -> dict[str, np.ndarray]:
    """Stash columns summed per (first step, last step) and tile, when that is denser than one row per variable.

    A layer's variables come as tensors spread over the tiles, so they share
    a hundred or so (first, last) pairs: one row of bytes per tile for each
    pair (``dense``) is then all a stash entry needs of them, and which pairs
    join it is a handful of comparisons.
    """
    first, last = cols["first"].astype(np.int64), cols["last"].astype(np.int64)
    if first.size == 0 or first.min() < -1 or last.min() < -1 or max(first.max(), last.max()) >= 2**31:
        return cols
    pairs = _pair_groups(first + 1, last + 1)
    if pairs is None:
        # Steps are -1 (never live) or below 2**31: one int64 key per pair.
        keys, group = unique_inverse(((first + 1) << 32) | (last + 1))
        pair_first, pair_last = (keys >> 32) - 1, (keys & 0xFFFFFFFF) - 1
    else:
        pair_first, pair_last, group = pairs[0] - 1, pairs[1] - 1, pairs[2]
    if pair_first.size * tiles > 4 * first.size:
        return cols
    # float64 bincount: exact while a tile's bytes in one group are below 2**53.
    dense = np.bincount(group * tiles + cols["tile"], weights=cols["nbytes"],
                        minlength=pair_first.size * tiles).astype(np.int64).reshape(-1, tiles)
    return {"first": pair_first, "last": pair_last, "dense": dense}


def _pair_groups(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Distinct (a, b) pairs in lexicographic order and each row's pair, by tables rather than a sort.

    ``a`` and ``b`` are non-negative int64 (steps). Each column's values are
    ranked through a table over its range, and the pairs of ranks through a
    table over their product, so the order is that of a sort on ``(a, b)``.
    None when the tables would be large (then sort).
    """
    a_hi, b_hi = int(a.max()), int(b.max())
    if max(a_hi, b_hi) >= 1 << 22:
        return None
    ranked_a, ranked_b = rank_by_table(a), rank_by_table(b)
    assert ranked_a is not None and ranked_b is not None  # both spans are under 2**22
    (a_vals, a_rank), (b_vals, b_rank) = ranked_a, ranked_b
    if a_vals.size * b_vals.size > 1 << 22:
        return None
    pair = a_rank * b_vals.size + b_rank
    seen = np.zeros(a_vals.size * b_vals.size, bool)
    seen[pair] = True
    present = np.flatnonzero(seen)
    rank = np.cumsum(seen) - 1
    return a_vals[present // b_vals.size], b_vals[present % b_vals.size], rank[pair]


class _RunningStage:
    """Running per-tile memory of a growing set of operations.

    Control code, exchange code and vertex state add up; vertex presence is a
    running count per (type, tile). Variable liveness goes into the dense
    (liveness segment x tile) grid when there is one, else into the sorted
    event list of the set. In training, ``row_ops`` are the operations of
    the layers the set may grow by, in order (the first is the first layer
    added), and the stash columns of each layer's new variables are kept: see
    :class:`_StashRow`.
    """

    def __init__(self, engine: MemoryEngine, grid: _SegmentGrid | None,
                 row_ops: list[np.ndarray] | None = None) -> None:
        self.engine = engine
        p = engine.profile
        self.tiles = p.tiles
        self.additive = np.zeros(self.tiles, np.int64)
        self.presence = np.zeros((len(p.vertex_types.names), self.tiles + 1), np.int64)
        self.code = engine.model.code_by_type
        self.categories = engine.model.categories
        self.units = np.zeros_like(self.categories.whole) if self.categories is not None else None
        # Only variables several layers use can be in the set already: marked by their compact number.
        self.in_set = np.zeros(len(engine.multi_layer_index), bool)
        self.grid = grid
        if grid is not None:
            grid.clear()
            grid.owner = self
        self.events = _EventList(p) if grid is None else None
        self.lo, self.hi = 0, -1
        self.ops: list[np.ndarray] = []
        self.stash = _StashRow(engine, row_ops) if row_ops is not None else None
        #: What went into the shared grid, to put the set back after other sets used it.
        self.grid_adds: list[dict[str, np.ndarray]] = []

    def restore_grid(self) -> None:
        """Make the shared grid hold this set's variables again (other sets clear it)."""
        assert self.grid is not None
        self.grid.clear()
        self.grid.owner = self
        for events in self.grid_adds:
            self.grid.add(events)

    def add(self, parts: _LayerParts) -> None:
        self.ops.append(parts.ops)
        self.additive += parts.additive
        self.presence += parts.presence
        if self.units is not None and parts.units is not None:
            self.units += parts.units
        lo, hi = parts.lo, parts.hi
        if hi >= lo:
            self.lo, self.hi = (lo, hi) if self.hi < self.lo else (min(self.lo, lo), max(self.hi, hi))
        fresh = ~self.in_set[parts.shared_pos]
        self.in_set[parts.shared_pos] = True
        if self.grid is not None:
            assert parts.private_events is not None and parts.shared_events is not None
            added = (parts.private_events, _rows_of(parts.shared_events, fresh))
            for events in added:
                self.grid.add(events)
            self.grid_adds.extend(added)
        else:
            assert self.events is not None
            self.events.add(np.sort(np.concatenate((parts.private, parts.shared[fresh]))))
        if self.stash is not None and parts.private_stash is not None and parts.shared_stash is not None:
            self.stash.add(parts.private_stash, len(self.ops) - 1)
            self.stash.add(_rows_of(parts.shared_stash, fresh), len(self.ops) - 1)

    def total_per_tile(self) -> np.ndarray:
        present = np.cumsum(self.presence, axis=1)[:, : self.tiles] > 0
        code = (self.code * present).sum(axis=0)
        total = self.additive + code + self.variables_peak()
        if self.categories is not None and self.units is not None:
            total = total + self.categories.per_tile(self.units)
        return np.asarray(total)

    def variables_peak(self) -> np.ndarray:
        """Per tile, the most bytes of the set's variables live at once in its window."""
        if self.grid is not None:
            return self.grid.peak(self.lo, self.hi)
        assert self.events is not None
        return self.events.peak(self.lo, self.hi)

    def stash_entry(self) -> np.ndarray:
        """The engine's ``stash_entry_per_tile`` of the set so far (training)."""
        assert self.stash is not None  # built with the row's operations in training
        return self.stash.entry(len(self.ops) - 1)


class _StashRow:
    """One stash entry per tile of a set growing one layer at a time, each candidate read about once.

    While the stage's windows only widen as it grows (the usual case: see
    :meth:`popliner.memory.engine.MemoryEngine.stash_positions`), each
    candidate's growth of joining is found once, and its bytes wait in that
    growth's row of ``pending`` until the entry gets there. Windows are
    taken for a horizon of growths that doubles as needed; candidates that
    join beyond it are looked at again when it grows. If the windows stop
    widening, every later entry is the masked sum over all candidates of
    the set, as the engine takes it. Exact either way: integer bytes summed
    in float64 below 2**53, then as int64.
    """

    FIRST_HORIZON = 8

    def __init__(self, engine: MemoryEngine, row_ops: list[np.ndarray]) -> None:
        self.engine = engine
        self.tiles = engine.tiles
        self.row_ops = row_ops
        self.chunks: list[dict[str, np.ndarray]] = []  # every candidate so far (the slow path reads them)
        self.windows: list[StashWindows | None] = []
        self.fast = True
        #: (columns, growth added, rows of them) that join beyond the horizon, if ever.
        self.deferred: list[tuple[dict[str, np.ndarray], int, np.ndarray]] = []
        self.pending = np.zeros((0, self.tiles), np.int64)
        self.total = np.zeros(self.tiles, np.int64)
        self.folded = 0  # growths already summed into ``total``
        self._grow_horizon(min(self.FIRST_HORIZON, len(row_ops)))

    def add(self, cols: dict[str, np.ndarray], at: int) -> None:
        self.chunks.append(cols)
        if self.fast:
            self._place(cols, at)

    def entry(self, at: int) -> np.ndarray:
        """The entry after ``at + 1`` growths."""
        if self.fast and at >= len(self.windows):
            self._grow_horizon(min(max(2 * len(self.windows), at + 1), len(self.row_ops)))
        if not self.fast:
            return self._masked_sum(at)
        while self.folded <= at:
            self.total += self.pending[self.folded]
            self.folded += 1
        return self.total.copy()

    def _grow_horizon(self, horizon: int) -> None:
        ops = np.concatenate(self.row_ops[: len(self.windows)]) if self.windows else np.zeros(0, np.int64)
        for p in range(len(self.windows), horizon):
            ops = np.concatenate((ops, self.row_ops[p]))
            self.windows.append(self.engine.stash_windows(ops))
        if self.engine.stash_positions(np.zeros(0, np.int64), np.zeros(0, np.int64), self.windows) is None:
            self.fast = False  # the growths from the first that is not a widening take the slow path
            return
        grown = np.zeros((horizon, self.tiles), np.int64)
        grown[: len(self.pending)] = self.pending
        self.pending = grown
        deferred, self.deferred = self.deferred, []
        for cols, at, rows in deferred:
            self._place(cols, at, rows)

    def _place(self, cols: dict[str, np.ndarray], at: int, rows: np.ndarray | None = None) -> None:
        """Put the candidates ``rows`` of ``cols`` (all when None) where they join; keep the others for later."""
        first, last = (cols["first"], cols["last"]) if rows is None else (cols["first"][rows], cols["last"][rows])
        positions = self.engine.stash_positions(first, last, self.windows)
        assert positions is not None  # checked when the horizon grew
        positions = np.maximum(positions, at)
        horizon = len(self.windows)
        now = positions < horizon
        if now.any():
            picked = np.flatnonzero(now) if rows is None else rows[now]
            if "dense" in cols:
                # Sum the groups joining at each growth, then add one row per growth.
                order = np.argsort(positions[now], kind="stable")
                joined = positions[now][order]
                starts = np.flatnonzero(np.concatenate(([True], joined[1:] != joined[:-1])))
                self.pending[joined[starts]] += np.add.reduceat(cols["dense"][picked[order]], starts, axis=0)
            else:
                slot = positions[now] * self.tiles + cols["tile"][picked]
                # float64 bincount as in the engine: exact while a tile's bytes are below 2**53.
                self.pending += np.bincount(slot, weights=cols["nbytes"][picked], minlength=horizon * self.tiles
                                            ).astype(np.int64).reshape(horizon, self.tiles)
        if horizon < len(self.row_ops) and not now.all():
            # Only indices are kept: the columns stay shared with the layer's parts.
            self.deferred.append((cols, at, np.flatnonzero(~now) if rows is None else rows[~now]))

    def _masked_sum(self, at: int) -> np.ndarray:
        out = np.zeros(self.tiles, np.int64)
        windows = self.engine.stash_windows(np.concatenate(self.row_ops[: at + 1]))
        if windows is None:
            return out
        for c in self.chunks:
            stash = self.engine.stash_select(c["first"], c["last"], windows)
            if "dense" in c:
                out += c["dense"][stash].sum(axis=0)
            else:
                # float64 bincount as in the engine: exact while a tile's entry is below 2**53 bytes.
                out += np.bincount(c["tile"][stash], weights=c["nbytes"][stash], minlength=self.tiles).astype(np.int64)
        return out


def _rows_of(cols: dict[str, np.ndarray], fresh: np.ndarray) -> dict[str, np.ndarray]:
    """The rows whose owner variable is fresh (not yet in the range)."""
    keep = fresh[cols["owner"]]
    return {name: col[keep] for name, col in cols.items()}


class _SegmentGrid:
    """Live bytes per (liveness segment, tile) of a growing set of variables, read in blocks of segments.

    The distinct interval starts and ends of the profile's liveness classes,
    ``ends``, cut the steps into segments; live bytes are constant within one.
    ``diff[k, t]`` holds the bytes that go live (+) or die (-) at ``ends[k]``
    on tile ``t``, so a running sum over segments gives the live bytes of
    every segment, and the peak over steps ``lo..hi`` is the largest of the
    segments holding ``lo`` to ``hi``. Adding variables is a scatter, with no
    sort, and the grid's cost does not depend on the number of variables, so
    it is used only when it is small (synthetic profiles have under 3,000
    distinct interval ends at 1x, 13,111 at 4x).

    Segments are grouped in blocks of :attr:`BLOCK`. Each block keeps its own
    running sums (``run``), their largest value (``block_max``) and its net
    change (``block_sum``), refreshed only for the blocks that variables were
    added to since the last reading: a layer's events fall in a few blocks
    (its forward and backward steps), so adding a layer to a range no longer
    costs a pass over the whole grid. A reading chains the blocks' net
    changes (one row per block) and takes the blocks inside the window whole.
    Integer sums in any order: the figures are those of one running sum over
    all segments, to the byte.
    """

    #: Largest grid, in cells (two int32 or int64 buffers of that size: differences and running sums).
    #: 2**25 cells takes the 96-layer BERT-Large training profile (1472 tiles x 13,111 segments,
    #: 19.3 M cells) on the grid: there the event list re-sorts millions of events for every layer
    #: added and a solve took tens of minutes.
    MAX_CELLS = 1 << 25
    #: Segments per block: a layer of the synthetic BERT-Large touches 4 to 8 blocks of 64 of 52 at 1x.
    BLOCK = 64

    def __init__(self, profile: Profile, ends: np.ndarray, block: int | None = None) -> None:
        self.p = profile
        self.ends = ends
        self.width = len(ends)
        self.tiles = profile.tiles
        self.block = block if block is not None else self.BLOCK
        self.nblocks = max(-(-self.width // self.block), 1)
        # Column of each interval's start and end, once per profile.
        self.col_start = np.searchsorted(ends, profile.iv_start)
        self.col_end = np.searchsorted(ends, profile.iv_end)
        # int32 cells when no tile's variables reach 2**31 bytes in all: every
        # live figure is then the bytes of a subset of them, and every partial
        # sum (within a block, or a block's net change) the difference of two.
        per_tile = np.bincount(profile.variables.tile, weights=profile.variables.bytes, minlength=profile.tiles)
        self.dtype = np.int32 if per_tile.size == 0 or per_tile.max() < 2**31 - 1 else np.int64
        cells = self.nblocks * self.block * max(self.tiles, 1)
        self.cell_dtype = np.int32 if cells < 2**31 else np.int64
        shape = (self.nblocks, self.block, self.tiles)
        self.diff = np.zeros(shape, self.dtype)
        self.run = np.zeros(shape, self.dtype)
        self.block_max = np.zeros((self.nblocks, self.tiles), self.dtype)
        self.block_sum = np.zeros((self.nblocks, self.tiles), self.dtype)
        self.stale = np.zeros(self.nblocks, bool)  # events added since the block's sums were taken
        self.touched = np.zeros(self.nblocks, bool)  # events added since the last clear
        self.owner: object | None = None  # the running set whose variables the grid holds

    @classmethod
    def of(cls, profile: Profile, block: int | None = None) -> _SegmentGrid:
        return cls(profile, _segment_ends(profile), block)

    @classmethod
    def fits(cls, profile: Profile) -> bool:
        """Is the grid small enough for the automatic choice?"""
        return profile.tiles * max(len(_segment_ends(profile)), 1) <= cls.MAX_CELLS

    def clear(self) -> None:
        touched = np.flatnonzero(self.touched)
        if touched.size:
            for buffer in (self.diff, self.run, self.block_max, self.block_sum):
                buffer[touched] = 0
            self.touched[:] = False
            self.stale[:] = False

    def events_of(self, var_idx: np.ndarray, with_owner: bool = False) -> dict[str, np.ndarray]:
        """Grid cells (segment x tiles + tile) where each variable's intervals start and end, and its bytes."""
        p = self.p
        v = p.variables
        cls = v.klass[var_idx]
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        iv = expand_ranges(p.class_ptr[cls], counts)
        owner = np.repeat(np.arange(len(var_idx)), counts)
        tile = v.tile[var_idx].astype(np.int64)[owner]
        events = {"start": (self.col_start[iv] * self.tiles + tile).astype(self.cell_dtype),
                  "end": (self.col_end[iv] * self.tiles + tile).astype(self.cell_dtype),
                  "nbytes": v.bytes[var_idx][owner].astype(self.dtype)}
        if with_owner:
            events["owner"] = owner
        return events

    def merged(self, var_idx: np.ndarray) -> dict[str, np.ndarray]:
        """The events of the variables as one net change per cell, which :meth:`add` applies without ``add.at``.

        For a layer's private variables, added to every range that holds the
        layer: the merge is done once. When the events fill most cells of the
        segments they touch (a layer's activations are spread over all tiles),
        the change is kept dense, as rows of those segments, and an addition
        is a plain add of rows; else as distinct cells and a plain indexed add
        (exact either way: integer sums in any order).
        """
        p = self.p
        v = p.variables
        cls = v.klass[var_idx]
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        iv = expand_ranges(p.class_ptr[cls], counts)
        tile, nbytes = v.tile[var_idx].astype(np.int64), v.bytes[var_idx].astype(np.int64)
        if iv.size != var_idx.size or not (counts == 1).all():  # else one interval per variable, in order
            owner = np.repeat(np.arange(len(var_idx)), counts)
            tile, nbytes = tile[owner], nbytes[owner]
        # Segment of each start (+bytes) and end (-bytes).
        start, end = self.col_start[iv], self.col_end[iv]
        present = np.zeros(self.nblocks * self.block, bool)
        present[start] = True
        present[end] = True
        segments = np.flatnonzero(present)
        blocks = np.unique(segments // self.block)
        if segments.size * self.tiles <= 4 * iv.size:
            position = np.cumsum(present) - 1
            size = segments.size * self.tiles
            # float64 bincounts: exact while a cell's bytes are below 2**53 (so is their difference).
            dense = np.bincount(position[start] * self.tiles + tile, weights=nbytes, minlength=size)
            dense -= np.bincount(position[end] * self.tiles + tile, weights=nbytes, minlength=size)
            return {"rows": segments, "dense": dense.astype(np.int64).astype(self.dtype).reshape(-1, self.tiles),
                    "blocks": blocks}
        uniq, inverse = unique_inverse(np.concatenate((start, end)) * self.tiles + np.concatenate((tile, tile)))
        net = np.zeros(len(uniq), np.int64)
        np.add.at(net, inverse, np.concatenate((nbytes, -nbytes)))
        keep = net != 0
        return {"cells": uniq[keep].astype(self.cell_dtype), "delta": net[keep].astype(self.dtype), "blocks": blocks}

    def add(self, events: dict[str, np.ndarray]) -> None:
        if "rows" in events:
            if events["rows"].size:
                self.diff.reshape(-1, self.tiles)[events["rows"]] += events["dense"]
                self._mark(events["blocks"])
            return
        if "cells" in events:
            if events["cells"].size:
                flat = self.diff.reshape(-1)
                flat[events["cells"]] += events["delta"]  # distinct cells: a plain indexed add is exact
                self._mark(events["blocks"])
            return
        if events["nbytes"].size == 0:
            return
        flat = self.diff.reshape(-1)
        # Integer scatter-adds: exact, whatever the order.
        np.add.at(flat, events["start"], events["nbytes"])
        np.add.at(flat, events["end"], -events["nbytes"])
        per_block = self.block * max(self.tiles, 1)
        self._mark(np.concatenate((events["start"], events["end"])) // per_block)

    def _mark(self, blocks: np.ndarray) -> None:
        self.stale[blocks] = True
        self.touched[blocks] = True

    def _refresh(self) -> None:
        """Running sums, largest value and net change of every block changed since the last reading."""
        stale = np.flatnonzero(self.stale)
        if stale.size == 0:
            return
        run = self.diff[stale]
        # Row by row along the block: numpy's cumsum over a middle axis is several times slower.
        for r in range(1, self.block):
            np.add(run[:, r - 1], run[:, r], out=run[:, r])
        self.run[stale] = run
        self.block_max[stale] = run.max(axis=1)
        self.block_sum[stale] = run[:, -1]
        self.stale[stale] = False

    def peak(self, lo: int, hi: int) -> np.ndarray:
        """Per tile, the most live bytes at any step ``lo..hi`` (inclusive)."""
        out = np.zeros(self.tiles, np.int64)
        if hi < lo or not self.touched.any():
            return out
        # Segment k covers steps ends[k] <= s < ends[k+1]; before ends[0] nothing is live.
        k_lo = int(np.searchsorted(self.ends, lo, side="right")) - 1
        k_hi = int(np.searchsorted(self.ends, hi, side="right")) - 1
        if k_hi < 0:
            return out
        self._refresh()
        first = max(k_lo, 0)
        b_lo, b_hi = first // self.block, k_hi // self.block
        # Live bytes before each block of the window: the net changes of the blocks before it.
        before = np.zeros((b_hi + 1, self.tiles), np.int64)
        np.cumsum(self.block_sum[:b_hi], axis=0, out=before[1:])
        lo_row, hi_row = first % self.block, k_hi % self.block
        if b_lo == b_hi:
            out = self.run[b_lo, lo_row : hi_row + 1].max(axis=0) + before[b_lo]
        else:
            out = self.run[b_lo, lo_row:].max(axis=0) + before[b_lo]
            np.maximum(out, self.run[b_hi, : hi_row + 1].max(axis=0) + before[b_hi], out=out)
            if b_hi > b_lo + 1:
                inside = self.block_max[b_lo + 1 : b_hi] + before[b_lo + 1 : b_hi]
                np.maximum(out, inside.max(axis=0), out=out)
        return np.asarray(np.maximum(out, 0))


def _segment_ends(profile: Profile) -> np.ndarray:
    return np.union1d(profile.iv_start, profile.iv_end).astype(np.int64)


class _EventList:
    """Sorted liveness events (+bytes at a start, -bytes at an end) per tile, unclipped.

    Events cover all steps; a window is applied when reading the peak, so
    adding variables never invalidates what is already sorted.
    """

    def __init__(self, profile: Profile) -> None:
        self.p = profile
        self.tile_bits = max(profile.tiles - 1, 1).bit_length()
        self.pos_bits = (profile.num_steps + 1).bit_length() + 1
        self.keys = np.zeros(0, np.int64)
        self.deltas = np.zeros(0, np.int64)

    def add(self, var_idx: np.ndarray) -> None:
        if var_idx.size == 0:
            return
        p = self.p
        v = p.variables
        key = v.klass[var_idx].astype(np.int64) * p.tiles + v.tile[var_idx]
        uniq, inv = unique_inverse(key)
        nbytes = np.bincount(inv, weights=v.bytes[var_idx]).astype(np.int64)
        cls, tile = uniq // p.tiles, uniq % p.tiles
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        rep = np.repeat(np.arange(len(cls)), counts)
        iv = expand_ranges(p.class_ptr[cls], counts)
        t = tile[rep]
        base = t << self.pos_bits
        keys = np.concatenate((base | (p.iv_end[iv] << 1), base | (p.iv_start[iv] << 1) | 1))
        deltas = np.concatenate((-nbytes[rep], nbytes[rep]))
        keys = np.concatenate((self.keys, keys))
        deltas = np.concatenate((self.deltas, deltas))
        # Two sorted runs: a stable sort (timsort) merges them in linear time.
        order = np.argsort(keys, kind="stable")
        self.keys, self.deltas = keys[order], deltas[order]

    def peak(self, lo: int, hi: int) -> np.ndarray:
        tiles = self.p.tiles
        out = np.zeros(tiles, np.int64)
        if self.keys.size == 0 or hi < lo:
            return out
        running = np.cumsum(self.deltas)
        tile = self.keys >> self.pos_bits
        pos = (self.keys & ((1 << self.pos_bits) - 1)) >> 1
        starts = np.searchsorted(tile, np.arange(tiles))
        before = np.concatenate(([0], running))[starts]  # running total before each tile's events
        rel = running - before[tile]
        # Live bytes at step lo: after every event at or before lo.
        last_at_lo = np.searchsorted(self.keys, (np.arange(tiles, dtype=np.int64) << self.pos_bits)
                                     | (np.int64(lo) << 1) | 1, side="right") - 1
        has = last_at_lo >= starts
        out[has] = rel[last_at_lo[has]]
        inside = (pos > lo) & (pos <= hi)
        if inside.any():
            np.maximum.at(out, tile[inside], rel[inside])
        return np.maximum(out, 0)
