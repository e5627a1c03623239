"""Memory and cost of contiguous layer ranges: the table every solver reads.

A stage is a contiguous range ``i..j`` of layers (in layer order); the first
stage also holds the operations without a layer, as PopLiner did. A stage's
memory is the memory model applied to all its operations, never the sum of
its layers' figures (code is shared, liveness peaks do not add up), so the
table evaluates ranges: for each start ``i`` it extends ``j`` one layer at a
time, adding the new layer's programs and variables to running state, and
stops once the range no longer fits the largest budget of interest (memory
only grows as a range grows).

In training, the IPU at position ``k`` of ``K`` also holds activation stashes:
``2(K-1-k)+1`` entries on IPU ``k`` and none on the last IPU; one entry is
already in the single-IPU liveness, so ``max(depth-1, 0)`` extra entries are
added per tile.
"""

from __future__ import annotations

import math
import weakref
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.analysis import Analysis
from popliner.memory.types import StageMemory
from popliner.arrays import expand_ranges, gather_csr, unique_inverse
from popliner.profile.model import Profile

__all__ = ["ArrayRanges", "ProfileRanges", "RangeCosts", "SplitProblem", "extra_stash_entries", "stash_depth"]

#: A range that does not fit (or was not evaluated because a shorter one did not).
OVERFLOW = math.inf


def stash_depth(position: int, num_stages: int) -> int:
    """Stash entries PopART keeps on the IPU at ``position`` of ``num_stages``."""
    if position >= num_stages - 1:
        return 0
    return 2 * (num_stages - 1 - position) + 1


def extra_stash_entries(position: int, num_stages: int) -> int:
    """Entries beyond the one the single-IPU profile already holds."""
    return max(stash_depth(position, num_stages) - 1, 0)


@dataclass(frozen=True)
class SplitProblem:
    """What the user asked for: IPUs, budget and constraints (layer indices)."""

    num_ipus: int
    budget: int  # bytes per tile a stage may use (headroom already taken off)
    exact_ipus: bool = False
    min_layers: int = 1
    split_after: tuple[int, ...] = ()
    same_ipu: tuple[tuple[int, int], ...] = ()
    keep_shared_together: bool = False
    training: bool = False

    def allowed_split(self, j: int, forbidden: frozenset[int]) -> bool:
        """May a stage end after layer ``j`` (with more layers after it)?"""
        if j in forbidden:
            return False
        return all(not (min(a, b) <= j < max(a, b)) for a, b in self.same_ipu)


class RangeCosts(ABC):
    """Memory and cost of every contiguous range ``i..j`` (inclusive) of layers."""

    @property
    @abstractmethod
    def num_layers(self) -> int: ...

    @property
    @abstractmethod
    def layer_names(self) -> tuple[str, ...]: ...

    @abstractmethod
    def memory(self, i: int, j: int, extra_stash: int) -> float:
        """Worst-tile bytes of the range with ``extra_stash`` extra stash entries (inf if over the limit)."""

    @abstractmethod
    def compute(self, i: int, j: int) -> int:
        """Compute cycles of one micro-batch through the range."""

    @abstractmethod
    def crossing(self, j: int) -> int:
        """Bytes crossing the boundary after layer ``j`` (0 after the last layer)."""

    @abstractmethod
    def transfer(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` over the IPU link."""

    @property
    @abstractmethod
    def has_cycles(self) -> bool: ...

    def cost(self, i: int, j: int) -> int:
        """Compute cycles plus the transfer of what the range receives."""
        return self.compute(i, j) + (self.transfer(self.crossing(i - 1)) if i > 0 else 0)

    def forbidden_splits(self, problem: SplitProblem) -> frozenset[int]:
        return frozenset()


class ArrayRanges(RangeCosts):
    """A range table from explicit numbers (tests, properties, what-if studies).

    Range memory is ``max(peak[i..j]) + sum(base[i..j])`` plus stash entries,
    a sub-additive shape like the real model's.
    """

    def __init__(self, base: Sequence[int], peak: Sequence[int], cycles: Sequence[int],
                 crossing: Sequence[int], stash: Sequence[int] | None = None, limit: float = OVERFLOW,
                 bytes_per_cycle: float = 1.0) -> None:
        self._base = list(base)
        self._peak = list(peak)
        self._cycles = list(cycles)
        self._cross = list(crossing)
        self._stash = list(stash) if stash is not None else [0] * len(self._base)
        self._limit = limit
        self._bpc = bytes_per_cycle

    @property
    def num_layers(self) -> int:
        return len(self._base)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(self.num_layers))

    @property
    def has_cycles(self) -> bool:
        return any(self._cycles)

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        value = max(self._peak[i : j + 1]) + sum(self._base[i : j + 1]) + extra_stash * sum(self._stash[i : j + 1])
        return value if value <= self._limit else OVERFLOW

    def compute(self, i: int, j: int) -> int:
        return sum(self._cycles[i : j + 1])

    def crossing(self, j: int) -> int:
        return self._cross[j] if 0 <= j < self.num_layers - 1 else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bpc)


class ProfileRanges(RangeCosts):
    """The range table of an analysed profile, evaluated lazily and memoised.

    Tables of the same analysis (a solve builds several: the asked budget,
    relaxed budgets for a best-effort split) share what does not depend on
    the limit: per-layer parts, crossing bytes and every range figure already
    evaluated, so a second table only evaluates ranges the first did not.
    """

    def __init__(self, analysis: Analysis, limit: int, link_bytes_per_second: float = 64e9) -> None:
        self.analysis = analysis
        self.limit = limit
        self._names = analysis.layer_names
        self._clock = analysis.profile.target.clock_hz
        self._bytes_per_cycle = link_bytes_per_second / self._clock
        self._training = analysis.mode == "training"
        self._ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._done_from: set[int] = set()
        self._shared = _Shared.of(analysis)
        self._layer_ops = self._shared.layer_ops
        self._layer_cycles = self._shared.layer_cycles
        self._cross = self._shared.cross

    # -- RangeCosts -----------------------------------------------------------

    @property
    def num_layers(self) -> int:
        return len(self._names)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return self._names

    @property
    def has_cycles(self) -> bool:
        return bool(self.analysis.profile.programs.has_cycles and self._layer_cycles.any())

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        entry = self._range(i, j)
        if entry is None:
            return OVERFLOW
        total, stash = entry
        worst = int((total + extra_stash * stash).max()) if extra_stash else int(total.max())
        return worst if worst <= self.limit else OVERFLOW

    def compute(self, i: int, j: int) -> int:
        return int(self._layer_cycles[i : j + 1].sum())

    def crossing(self, j: int) -> int:
        return int(self._cross[j]) if 0 <= j < self.num_layers - 1 else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bytes_per_cycle) if nbytes else 0

    def forbidden_splits(self, problem: SplitProblem) -> frozenset[int]:
        if not problem.keep_shared_together:
            return frozenset()
        lo, hi = self._shared.always_live_spans
        forbidden: set[int] = set()
        for a, b in zip(lo.tolist(), hi.tolist()):
            forbidden.update(range(a, b))
        return frozenset(forbidden)

    # -- stage figures ----------------------------------------------------------

    def stage_ops(self, i: int, j: int) -> np.ndarray:
        return np.concatenate(self._layer_ops[i : j + 1])

    def stage_memory(self, i: int, j: int) -> StageMemory:
        return self.analysis.model.stage(self.stage_ops(i, j))

    def stash_per_tile(self, i: int, j: int) -> np.ndarray:
        return self.analysis.stash_entry_per_tile(self._names[i : j + 1], first_stage=(i == 0))

    # -- incremental evaluation -----------------------------------------------

    def _range(self, i: int, j: int) -> tuple[np.ndarray, np.ndarray] | None:
        if i not in self._done_from:
            self._extend_from(i)
        return self._ranges.get((i, j))

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
                    state = _RunningStage(self.analysis, shared.liveness_grid(self.analysis.profile))
                    for k in range(i, j):  # figures known: rebuild the running set only
                        state.add(shared.layer_parts(self.analysis, k))
                state.add(shared.layer_parts(self.analysis, j))
                total = state.total_per_tile()
                worst = int(total.max())
                stash = None
                if worst <= self.limit:
                    # Same figure as stash_per_tile(i, j), from the running set of variables.
                    stash = state.stash_entry() if self._training else np.zeros_like(total)
                known = shared.figures[(i, j)] = (worst, stash, total)
            elif state is not None:
                state.add(shared.layer_parts(self.analysis, j))
            worst, stash, total = known
            if worst > self.limit or stash is None:  # stash is None only when worst > a limit <= this one
                break  # memory only grows with j: no longer range fits either
            self._ranges[(i, j)] = (total, stash)


class _Shared:
    """Per analysis: what every range table of it can reuse, whatever its limit.

    Held in a weak-keyed map, so it goes when the analysis goes; it keeps no
    reference to the analysis itself (that would keep the key alive).
    """

    _by_analysis: weakref.WeakKeyDictionary[Analysis, _Shared] = weakref.WeakKeyDictionary()

    def __init__(self, analysis: Analysis) -> None:
        names = analysis.layer_names
        self.layer_ops = [analysis.stage_ops([n], first_stage=(k == 0)) for k, n in enumerate(names)]
        self.layer_cycles = np.array([int(analysis.op_cycles[o].sum()) for o in self.layer_ops], np.int64)
        self._parts: dict[int, _LayerParts] = {}
        self._grid: _SegmentGrid | None = None
        #: (i, j) -> (worst tile bytes, stash entry per tile or None when over the limit asked, total per tile)
        self.figures: dict[tuple[int, int], tuple[int, np.ndarray | None, np.ndarray]] = {}
        self._layer_spans(analysis)

    @classmethod
    def of(cls, analysis: Analysis) -> _Shared:
        found = cls._by_analysis.get(analysis)
        if found is None:
            found = cls._by_analysis[analysis] = cls(analysis)
        return found

    def layer_parts(self, analysis: Analysis, j: int) -> _LayerParts:
        """What layer ``j`` adds to any range holding it (memoised: every start reuses it)."""
        parts = self._parts.get(j)
        if parts is None:
            parts = self._parts[j] = _LayerParts.of(analysis, self.layer_ops[j], self.liveness_grid(analysis.profile),
                                                    self.multi_layer)
        return parts

    def liveness_grid(self, profile: Profile) -> _SegmentGrid | None:
        """The dense (tile x liveness segment) grid, or None when it would be too big."""
        if self._grid is None:
            self._grid = _SegmentGrid.of(profile)
        return self._grid if self._grid.usable else None

    def _layer_spans(self, a: Analysis) -> None:
        """Crossing bytes per boundary, always-live spans, and which variables several layers use."""
        ops = a.ops
        num_layers = len(self.layer_ops)
        layer_of_op = a.layers.layer_of_op.copy()
        layer_of_op[layer_of_op < 0] = 0  # unlayered operations live in the first stage
        counted = np.flatnonzero(a.model.counted_vars)
        lay_of = layer_of_op[counted]
        n = a.profile.variables.count
        lo = np.full(n, np.iinfo(np.int64).max, np.int64)
        hi = np.full(n, -1, np.int64)
        # Smallest and largest layer per variable, one plain scatter per layer in
        # layer order (later layers overwrite hi, earlier ones lo). Every value in
        # one scatter is the same, so repeated indices cannot matter; this gives
        # np.minimum.at / np.maximum.at's arrays several times faster.
        per_layer = [(k, gather_csr(ops.var_ptr, ops.var_idx, counted[lay_of == k]))
                     for k in np.unique(lay_of).tolist()]
        for k, var in per_layer:
            hi[var] = k
        for k, var in reversed(per_layer):
            lo[var] = k
        del per_layer
        multi = hi > lo
        always = a.always_live_var
        # Variables used by layers lo < hi: the not-always-live ones cross every
        # boundary in between; the always-live ones forbid those splits on request.
        pick = multi & ~always
        diff = np.zeros(num_layers + 1, np.int64)
        np.add.at(diff, lo[pick], a.profile.variables.bytes[pick])
        np.add.at(diff, hi[pick], -a.profile.variables.bytes[pick])
        self.cross = np.cumsum(diff)[: max(num_layers - 1, 0)]
        pick = multi & always
        self.always_live_spans = (lo[pick], hi[pick])
        self.multi_layer = multi


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
    def of(cls, analysis: Analysis, ops: np.ndarray, grid: _SegmentGrid | None,
           multi_layer: np.ndarray) -> _LayerParts:
        p = analysis.profile
        progs = p.programs
        tiles = p.tiles
        model = analysis.model
        prog = analysis.ops.programs_of_set(ops)
        additive = progs.control.sum_rows(prog[model._leaf[prog]], tiles)
        additive += progs.exchange.sum_rows(prog[model._exchange[prog]], tiles)
        presence = np.zeros((len(p.vertex_types.names), tiles + 1), np.int64)
        runs = progs.vertices.runs_of(prog)
        if runs.size:
            vtype = progs.vertices.key[runs].astype(np.int64)
            additive += progs.vertices.sum_runs(runs, tiles, weights=p.vertex_types.size[vtype])
            np.add.at(presence, (vtype, progs.vertices.first[runs]), 1)
            np.add.at(presence, (vtype, progs.vertices.stop[runs]), -1)
        lo, hi = model.window(ops)
        var = model.counted_variables(ops)
        multi = multi_layer[var]
        private, shared = var[~multi], var[multi]
        return cls(ops, additive, presence, lo, hi, private, shared,
                   grid.events_of(private) if grid is not None else None,
                   grid.events_of(shared, with_owner=True) if grid is not None else None,
                   _stash_columns(analysis, private), _stash_columns(analysis, shared, with_owner=True))


def _stash_columns(analysis: Analysis, var: np.ndarray, with_owner: bool = False) -> dict[str, np.ndarray] | None:
    """What a stash entry reads of each variable that is not always live (training only)."""
    if analysis.mode != "training":
        return None
    keep = np.flatnonzero(~analysis.always_live_var[var])  # never part of a stash entry
    sv = var[keep]
    v = analysis.profile.variables
    cols = {"first": analysis.var_first_step[sv], "last": analysis.var_last_step[sv], "tile": v.tile[sv],
            "nbytes": v.bytes[sv]}
    if with_owner:
        cols["owner"] = keep
    return cols


class _RunningStage:
    """Running per-tile memory of a growing set of operations.

    Control code, exchange code and vertex state add up; vertex presence is a
    running count per (type, tile). Variable liveness goes into the dense
    (tile x liveness segment) grid when the profile has few enough distinct
    interval ends, else into the sorted event list of the set. In training,
    the stash columns of each layer's new variables are kept, so one stash
    entry is a masked sum rather than a new set union.
    """

    def __init__(self, analysis: Analysis, grid: _SegmentGrid | None) -> None:
        self.a = analysis
        p = analysis.profile
        self.tiles = p.tiles
        self.additive = np.zeros(self.tiles, np.int64)
        self.presence = np.zeros((len(p.vertex_types.names), self.tiles + 1), np.int64)
        self.code = analysis.model._code
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
        return self.additive + code + peak

    def stash_entry(self) -> np.ndarray:
        """``Analysis.stash_entry_per_tile`` of the set so far (training)."""
        a = self.a
        out = np.zeros(self.tiles, np.int64)
        ops = np.concatenate(self.ops)
        back = a.backward_part(ops)
        fwd_lo, fwd_hi = a.model.window(ops[~back])
        bwd_lo, bwd_hi = a.model.window(ops[back])
        if fwd_hi < fwd_lo or bwd_hi < bwd_lo:
            return out
        for c in self.stash_chunks:
            stash = _between(c["first"], fwd_lo, fwd_hi) & _between(c["last"], bwd_lo, bwd_hi)
            # float64 bincount as in Analysis: exact while a tile's entry is below 2**53 bytes.
            out += np.bincount(c["tile"][stash], weights=c["nbytes"][stash], minlength=self.tiles).astype(np.int64)
        return out


def _between(x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``(x >= lo) & (x <= hi)`` for int64 ``x`` and ``lo <= hi``, in one comparison."""
    return (x - lo).view(np.uint64) <= np.uint64(hi - lo)


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
    MAX_CELLS = 1 << 23

    def __init__(self, profile: Profile, ends: np.ndarray, usable: bool) -> None:
        self.p = profile
        self.ends = ends
        self.usable = usable
        self.width = len(ends)
        self._dirty = False
        if usable:
            # Column of each interval's start and end, once per profile.
            self.col_start = np.searchsorted(ends, profile.iv_start)
            self.col_end = np.searchsorted(ends, profile.iv_end)
            # int32 cells when no tile's variables reach 2**31 bytes in all: every
            # cell and every running sum is then the bytes of a subset of them.
            per_tile = np.bincount(profile.variables.tile, weights=profile.variables.bytes,
                                   minlength=profile.tiles)
            self.dtype = np.int32 if per_tile.size == 0 or per_tile.max() < 2**31 - 1 else np.int64
            self.diff = np.zeros((profile.tiles, self.width), self.dtype)
            self.live = np.empty_like(self.diff)

    @classmethod
    def of(cls, profile: Profile) -> _SegmentGrid:
        ends = np.union1d(profile.iv_start, profile.iv_end).astype(np.int64)
        usable = profile.tiles * max(len(ends), 1) <= cls.MAX_CELLS
        return cls(profile, ends, usable)

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
        # Cells fit int32: the grid has at most MAX_CELLS of them.
        events = {"start": (row + self.col_start[iv]).astype(np.int32),
                  "end": (row + self.col_end[iv]).astype(np.int32),
                  "nbytes": v.bytes[var_idx][owner].astype(self.dtype)}
        if with_owner:
            events["owner"] = owner
        return events

    def add(self, events: dict[str, np.ndarray]) -> None:
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
