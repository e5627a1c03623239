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
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.analysis import Analysis
from popliner.memory.types import StageMemory
from popliner.arrays import expand_ranges, gather_csr, unique_inverse
from popliner.profile.model import DO_EXCHANGE, Profile

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
    """The range table of an analysed profile, evaluated lazily and memoised."""

    def __init__(self, analysis: Analysis, limit: int, link_bytes_per_second: float = 64e9) -> None:
        self.analysis = analysis
        self.limit = limit
        self._names = analysis.layer_names
        self._clock = analysis.profile.target.clock_hz
        self._bytes_per_cycle = link_bytes_per_second / self._clock
        self._training = analysis.mode == "training"
        self._ranges: dict[tuple[int, int], tuple[np.ndarray, np.ndarray] | None] = {}
        self._done_from: set[int] = set()
        self._layer_ops = [analysis.stage_ops([n], first_stage=(k == 0)) for k, n in enumerate(self._names)]
        self._layer_cycles = np.array([int(analysis.op_cycles[o].sum()) for o in self._layer_ops], np.int64)
        self._cross = self._crossing_bytes()

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
        lo, hi, _ = self._var_layer_span(always_live_only=True)
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
        state = _RunningStage(self.analysis)
        for j in range(i, self.num_layers):
            state.add(self._layer_ops[j])
            total = state.total_per_tile()
            stash = self.stash_per_tile(i, j) if self._training else np.zeros_like(total)
            if int(total.max()) > self.limit:
                break  # memory only grows with j: no longer range fits either
            self._ranges[(i, j)] = (total, stash)

    def _crossing_bytes(self) -> np.ndarray:
        """Per boundary: bytes of not-always-live variables used on both sides."""
        lo, hi, nbytes = self._var_layer_span(always_live_only=False)
        diff = np.zeros(self.num_layers + 1, np.int64)
        np.add.at(diff, lo, nbytes)
        np.add.at(diff, hi, -nbytes)
        return np.cumsum(diff)[: max(self.num_layers - 1, 0)]

    def _var_layer_span(self, always_live_only: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Variables used by layers ``lo < hi``: first and last layer using them."""
        a = self.analysis
        ops = a.ops
        layer_of_op = a.layers.layer_of_op.copy()
        layer_of_op[layer_of_op < 0] = 0  # unlayered operations live in the first stage
        counted = np.flatnonzero(a.model.counted_vars)
        lens = ops.var_ptr[counted + 1] - ops.var_ptr[counted]
        var = gather_csr(ops.var_ptr, ops.var_idx, counted)
        lay = np.repeat(layer_of_op[counted], lens)
        n = a.profile.variables.count
        lo = np.full(n, np.iinfo(np.int64).max, np.int64)
        hi = np.full(n, -1, np.int64)
        np.minimum.at(lo, var, lay)
        np.maximum.at(hi, var, lay)
        always = a.always_live_var
        pick = (hi > lo) & (always if always_live_only else ~always)
        return lo[pick], hi[pick], a.profile.variables.bytes[pick]


class _RunningStage:
    """Running per-tile memory of a growing set of operations.

    Control code, exchange code and vertex state add up; vertex presence is a
    running count per (type, tile); variable liveness keeps the sorted event
    list of the set, so each extension merges the new variables' events into it.
    """

    def __init__(self, analysis: Analysis) -> None:
        self.a = analysis
        p = analysis.profile
        self.tiles = p.tiles
        self.additive = np.zeros(self.tiles, np.int64)
        self.presence = np.zeros((len(p.vertex_types.names), self.tiles + 1), np.int64)
        self.code = analysis.model._code
        self.in_set = np.zeros(p.variables.count, bool)
        self.events = _EventList(p)
        self.lo, self.hi = 0, -1
        self.ops: list[np.ndarray] = []
        self._leaf = p.programs.is_leaf()
        self._exchange = p.programs.type == DO_EXCHANGE

    def add(self, ops: np.ndarray) -> None:
        a, p = self.a, self.a.profile
        progs = p.programs
        self.ops.append(ops)
        prog = a.ops.programs_of_set(ops)
        self.additive += progs.control.sum_rows(prog[self._leaf[prog]], self.tiles)
        self.additive += progs.exchange.sum_rows(prog[self._exchange[prog]], self.tiles)
        runs = progs.vertices.runs_of(prog)
        if runs.size:
            vtype = progs.vertices.key[runs].astype(np.int64)
            self.additive += progs.vertices.sum_runs(runs, self.tiles, weights=p.vertex_types.size[vtype])
            np.add.at(self.presence, (vtype, progs.vertices.first[runs]), 1)
            np.add.at(self.presence, (vtype, progs.vertices.stop[runs]), -1)
        lo, hi = a.model.window(ops)
        if hi >= lo:
            self.lo, self.hi = (lo, hi) if self.hi < self.lo else (min(self.lo, lo), max(self.hi, hi))
        new = a.model.counted_variables(ops)
        new = new[~self.in_set[new]]
        self.in_set[new] = True
        self.events.add(new)

    def total_per_tile(self) -> np.ndarray:
        present = np.cumsum(self.presence, axis=1)[:, : self.tiles] > 0
        code = (self.code * present).sum(axis=0)
        return self.additive + code + self.events.peak(self.lo, self.hi)


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
