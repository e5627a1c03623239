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

from popliner.arrays import expand_ranges, unique_inverse
from popliner.memory.engine import MemoryEngine, StashWindows
from popliner.memory.types import StageMemory
from popliner.profile.model import Profile

__all__ = ["OVERFLOW", "Liveness", "ProfileRanges"]

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
    """

    def __init__(self, engine: MemoryEngine, limit: int, link_bytes_per_second: float = 64e9,
                 liveness: Liveness = "auto") -> None:
        self.engine = engine
        self.limit = limit
        # A wrapped head is no layer the solvers place: it goes with the range at position 0.
        self._wraps = engine.head_wraps
        self._names = engine.layer_names[:-1] if self._wraps else engine.layer_names
        self._wrapped: dict[int, tuple[np.ndarray, np.ndarray]] | None = None
        self._bytes_per_cycle = link_bytes_per_second / engine.profile.target.clock_hz
        self._training = engine.training
        self._ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._done_from: set[int] = set()
        self._memory: dict[tuple[int, int, int], float] = {}
        self._shared = _Shared.of(engine, liveness)
        self._layer_cycles = engine.layer_cycles
        self._cross = engine.crossing

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
        return self.engine.has_cycles

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
        head = self.engine.range_cycles(self.engine.head_layer, self.engine.head_layer) if self._wraps and i == 0 else 0
        return self.engine.range_cycles(i, j) + head

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
        """The direct model's figure of the range (memoised by the engine)."""
        return self.engine.stage_memory(self.stage_ops(i, j))

    # -- incremental evaluation -----------------------------------------------

    def _range(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        if i not in self._done_from:
            self._extend_from(i)
        return self._ranges.get((i, j))

    def _wrapped_range(self, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(total per tile, stash entry per tile) of range ``0..j`` with the wrapped head; None over the limit.

        The total is the model of the union of both stages' operations; the
        stash entry is the range's alone (the head stashes nothing).
        """
        if self._wrapped is None:
            self._wrapped = {}
            # The plain ranges first: they give the stash entries and use the shared grid themselves.
            plain = [self._range(0, k) for k in range(self.num_layers)]
            state = _RunningStage(self.engine, self._shared.grid)
            state.add(self._shared.layer_parts(self.engine.head_layer))
            for k, entry in enumerate(plain):
                if entry is None:
                    break  # the range alone is over the limit: with the head too
                state.add(self._shared.layer_parts(k))
                total = state.total_per_tile()
                if int(total.max()) > self.limit:
                    break
                self._wrapped[k] = (total, entry[1])
        return self._wrapped.get(j)

    def _extend_from(self, i: int) -> None:
        """Evaluate ``i..j`` for growing ``j`` until the range overflows the limit."""
        self._done_from.add(i)
        shared = self._shared
        state: _RunningStage | None = None
        for j in range(i, self.num_layers):
            known = shared.figures.get((i, j))
            if known is None or (known[1] is None and known[0] <= self.limit):
                # Not evaluated yet, or only up to its total (it overflowed a lower limit).
                if state is None:
                    state = _RunningStage(self.engine, shared.grid)
                    for k in range(i, j):  # figures known: rebuild the running set only
                        state.add(shared.layer_parts(k))
                state.add(shared.layer_parts(j))
                total = state.total_per_tile()
                if self.engine.view.recompute == "pipeline" and j < self.num_layers - 1:
                    # Recomputed from the stash when its backward starts: a figure of the whole stage.
                    total = self.engine.stage_memory(self.engine.range_ops(i, j)).total_per_tile
                worst = int(total.max())
                stash = None
                if worst <= self.limit:
                    # Same figure as the engine's stash_entry_per_tile, from the running set of variables.
                    stash = state.stash_entry() if self._training else np.zeros_like(total)
                known = shared.figures[(i, j)] = (worst, stash, total)
            elif state is not None:
                state.add(shared.layer_parts(j))
            worst, stash, total = known
            if worst > self.limit or stash is None:  # stash is None only when worst > a limit <= this one
                break  # memory only grows with j: no longer range fits either
            self._ranges[(i, j)] = (total, stash)


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
        #: (i, j) -> (worst tile bytes, stash entry per tile or None when over the limit asked, total per tile)
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray | None, np.ndarray]] = {}

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
    private_events: dict[str, np.ndarray] | None
    shared_events: dict[str, np.ndarray] | None
    private_stash: dict[str, np.ndarray] | None
    shared_stash: dict[str, np.ndarray] | None

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
                   grid.merged(grid.events_of(private)) if grid is not None else None,
                   grid.events_of(shared, with_owner=True) if grid is not None else None,
                   _stash_columns(engine, private), _stash_columns(engine, shared, with_owner=True))


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


class _RunningStage:
    """Running per-tile memory of a growing set of operations.

    Control code, exchange code and vertex state add up; vertex presence is a
    running count per (type, tile). Variable liveness goes into the dense
    (tile x liveness segment) grid when there is one, else into the sorted
    event list of the set. In training, the stash columns of each layer's new
    variables are kept, so one stash entry is a masked sum rather than a new
    set union.
    """

    def __init__(self, engine: MemoryEngine, grid: _SegmentGrid | None) -> None:
        self.engine = engine
        p = engine.profile
        self.tiles = p.tiles
        self.additive = np.zeros(self.tiles, np.int64)
        self.presence = np.zeros((len(p.vertex_types.names), self.tiles + 1), np.int64)
        self.code = engine.model.code_by_type
        self.in_set = np.zeros(p.variables.count, bool)  # only shared variables are marked
        self.grid = grid
        if grid is not None:
            grid.clear()
        self.events = _EventList(p) if grid is None else None
        self.lo, self.hi = 0, -1
        self.ops: list[np.ndarray] = []
        self.stash_chunks: list[dict[str, np.ndarray]] = []

    def add(self, parts: _LayerParts) -> None:
        self.ops.append(parts.ops)
        self.additive += parts.additive
        self.presence += parts.presence
        lo, hi = parts.lo, parts.hi
        if hi >= lo:
            self.lo, self.hi = (lo, hi) if self.hi < self.lo else (min(self.lo, lo), max(self.hi, hi))
        fresh = ~self.in_set[parts.shared]
        self.in_set[parts.shared] = True
        if self.grid is not None:
            assert parts.private_events is not None and parts.shared_events is not None
            self.grid.add(parts.private_events)
            self.grid.add(_rows_of(parts.shared_events, fresh))
        else:
            assert self.events is not None
            self.events.add(np.sort(np.concatenate((parts.private, parts.shared[fresh]))))
        if parts.private_stash is not None and parts.shared_stash is not None:
            self.stash_chunks.append(parts.private_stash)
            self.stash_chunks.append(_rows_of(parts.shared_stash, fresh))

    def total_per_tile(self) -> np.ndarray:
        present = np.cumsum(self.presence, axis=1)[:, : self.tiles] > 0
        code = (self.code * present).sum(axis=0)
        if self.grid is not None:
            peak = self.grid.peak(self.lo, self.hi)
        else:
            assert self.events is not None
            peak = self.events.peak(self.lo, self.hi)
        return np.asarray(self.additive + code + peak)

    def stash_entry(self) -> np.ndarray:
        """The engine's ``stash_entry_per_tile`` of the set so far (training)."""
        out = np.zeros(self.tiles, np.int64)
        windows: StashWindows | None = self.engine.stash_windows(np.concatenate(self.ops))
        if windows is None:
            return out
        for c in self.stash_chunks:
            stash = self.engine.stash_select(c["first"], c["last"], windows)
            # float64 bincount as in the engine: exact while a tile's entry is below 2**53 bytes.
            out += np.bincount(c["tile"][stash], weights=c["nbytes"][stash], minlength=self.tiles).astype(np.int64)
        return out


def _rows_of(cols: dict[str, np.ndarray], fresh: np.ndarray) -> dict[str, np.ndarray]:
    """The rows whose owner variable is fresh (not yet in the range)."""
    keep = fresh[cols["owner"]]
    return {name: col[keep] for name, col in cols.items()}


class _SegmentGrid:
    """Live bytes per (tile, liveness segment) of a growing set of variables.

    The distinct interval starts and ends of the profile's liveness classes,
    ``ends``, cut the steps into segments; live bytes are constant within one.
    ``diff[t, k]`` holds the bytes that go live (+) or die (-) at ``ends[k]``
    on tile ``t``, so a cumulative sum along a row gives the live bytes of
    every segment, and the peak over steps ``lo..hi`` is the largest of the
    segments holding ``lo`` to ``hi``. Adding variables is a scatter, with no
    sort; the grid's cost is ``tiles x segments`` per reading, whatever the
    number of variables, so it is used only when that is small (synthetic
    profiles have under 3,000 distinct interval ends at every scale).
    """

    #: Largest grid, in cells (int64 each; a second buffer of the same size holds the sums).
    #: 2**25 cells (128 MiB per int32 buffer) takes the 96-layer BERT-Large training profile
    #: (1472 tiles x 13,111 segments, 19.3 M cells) on the grid: there the event list re-sorts
    #: millions of events for every layer added and a solve took tens of minutes.
    MAX_CELLS = 1 << 25

    def __init__(self, profile: Profile, ends: np.ndarray) -> None:
        self.p = profile
        self.ends = ends
        self.width = len(ends)
        self._dirty = False
        # Column of each interval's start and end, once per profile.
        self.col_start = np.searchsorted(ends, profile.iv_start)
        self.col_end = np.searchsorted(ends, profile.iv_end)
        # int32 cells when no tile's variables reach 2**31 bytes in all: every
        # cell and every running sum is then the bytes of a subset of them.
        per_tile = np.bincount(profile.variables.tile, weights=profile.variables.bytes, minlength=profile.tiles)
        self.dtype = np.int32 if per_tile.size == 0 or per_tile.max() < 2**31 - 1 else np.int64
        # Cell indices fit int32 unless a forced grid is very large.
        self.cell_dtype = np.int32 if profile.tiles * max(self.width, 1) < 2**31 else np.int64
        self.diff = np.zeros((profile.tiles, self.width), self.dtype)
        self.live = np.empty_like(self.diff)

    @classmethod
    def of(cls, profile: Profile) -> _SegmentGrid:
        return cls(profile, _segment_ends(profile))

    @classmethod
    def fits(cls, profile: Profile) -> bool:
        """Is the grid small enough for the automatic choice?"""
        return profile.tiles * max(len(_segment_ends(profile)), 1) <= cls.MAX_CELLS

    def clear(self) -> None:
        if self._dirty:
            self.diff.fill(0)
            self._dirty = False

    def events_of(self, var_idx: np.ndarray, with_owner: bool = False) -> dict[str, np.ndarray]:
        """Grid cells where each variable's intervals start and end, and its bytes."""
        p = self.p
        v = p.variables
        cls = v.klass[var_idx]
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        iv = expand_ranges(p.class_ptr[cls], counts)
        owner = np.repeat(np.arange(len(var_idx)), counts)
        row = v.tile[var_idx].astype(np.int64)[owner] * self.width
        events = {"start": (row + self.col_start[iv]).astype(self.cell_dtype),
                  "end": (row + self.col_end[iv]).astype(self.cell_dtype),
                  "nbytes": v.bytes[var_idx][owner].astype(self.dtype)}
        if with_owner:
            events["owner"] = owner
        return events

    def merged(self, events: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The same events as one net change per distinct cell, which :meth:`add` applies without ``add.at``.

        For a layer's private variables, added to every range that holds the
        layer: the merge is done once, and each addition is then a plain
        indexed add over distinct cells (exact: integer sums in any order).
        """
        cells = np.concatenate((events["start"], events["end"]))
        delta = np.concatenate((events["nbytes"], -events["nbytes"]))
        uniq, inverse = unique_inverse(cells)
        net = np.zeros(len(uniq), np.int64)
        np.add.at(net, inverse, delta)
        keep = net != 0
        return {"cells": uniq[keep], "delta": net[keep].astype(self.dtype)}

    def add(self, events: dict[str, np.ndarray]) -> None:
        if "cells" in events:
            if events["cells"].size:
                flat = self.diff.reshape(-1)
                flat[events["cells"]] += events["delta"]  # distinct cells: a plain indexed add is exact
                self._dirty = True
            return
        if events["nbytes"].size == 0:
            return
        flat = self.diff.reshape(-1)
        # Integer scatter-adds: exact, whatever the order.
        np.add.at(flat, events["start"], events["nbytes"])
        np.add.at(flat, events["end"], -events["nbytes"])
        self._dirty = True

    def peak(self, lo: int, hi: int) -> np.ndarray:
        """Per tile, the most live bytes at any step ``lo..hi`` (inclusive)."""
        out = np.zeros(self.p.tiles, np.int64)
        if hi < lo or not self._dirty:
            return out
        # Segment k covers steps ends[k] <= s < ends[k+1]; before ends[0] nothing is live.
        k_lo = int(np.searchsorted(self.ends, lo, side="right")) - 1
        k_hi = int(np.searchsorted(self.ends, hi, side="right")) - 1
        if k_hi < 0:
            return out
        live = self.live[:, : k_hi + 1]
        np.cumsum(self.diff[:, : k_hi + 1], axis=1, out=live)
        np.max(live[:, max(k_lo, 0) :], axis=1, out=out)
        return np.maximum(out, 0)


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
