"""Per training option set: one range table, one suffix search, and the fastest split for every depth that fits.

The suffix search (:mod:`popliner.solvers.suffix`) reads each range of the
table once and answers every stage count at once: ``best[K][0]`` says
whether K IPUs fit. For each K that fits, the split is the exact solver's
over exactly K IPUs (:func:`popliner.solvers.solve.exact_optimum`, as
``--solve --exact-ipus`` gives it): the smallest slowest stage (compute
plus received transfer), then the least memory on the fullest IPU, then
the fewest bytes between IPUs. Only the chosen splits' stages get their
exact per-tile figures.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from popliner.analysis import Analysis
from popliner.arrays import csr_span, flagged_entries, sorted_unique
from popliner.memory.ranges import ProfileRanges
from popliner.memory.work import RangeWork
from popliner.ops.remote import remote_update_operations, streamed_state_variables
from popliner.pipeline import range_figure
from popliner.solvers.dp import copy_buffers, value_floors
from popliner.solvers.problem import Bounds, SplitProblem
from popliner.solvers.result import SplitResult, stage_result
from popliner.solvers.solve import exact_optimum, first_values
from popliner.solvers.suffix import suffix_table

__all__ = ["DepthSplit", "IpuTraffic", "OptionSearch", "TrafficTable", "search_options"]

_INF = math.inf


@dataclass(frozen=True)
class IpuTraffic:
    """What one IPU moves outside its pipeline each step: its gradients, and its off-chip optimizer state."""

    gradient_bytes: int
    state_bytes: int  # optimizer state streamed (0 when it stays on chip); this replica's shard


@dataclass(frozen=True)
class DepthSplit:
    """The fastest fitting split over K IPUs of one option set (``split`` None when none fits, with ``reason``)."""

    ipus: int
    split: SplitResult | None
    bounds: Bounds
    traffic: tuple[IpuTraffic, ...]
    reason: str = ""


@dataclass(frozen=True, eq=False)
class OptionSearch:
    """One option set's analysis and its splits by depth; what its memory facts said, kept once they are gone."""

    analysis: Analysis
    depths: dict[int, DepthSplit]
    recompute: str  # the mode the memory facts applied
    traffic: TrafficTable | None = None


def search_options(analysis: Analysis, depths: Sequence[int], budget: int, link_bytes_per_second: float,
                   traffic: TrafficTable | None = None, work: RangeWork | None = None) -> OptionSearch:
    """The fastest fitting split of ``analysis`` (already under its option set) for each of ``depths``.

    ``traffic``: the profile's :class:`TrafficTable` when already made (one serves every option set);
    ``work``: the plan's account of the ranges its tables evaluate (:class:`popliner.memory.work.RangeWork`).
    """
    training = analysis.mode == "training"
    n_layers = len(analysis.layout.placed_names)
    usable = [k for k in depths if k <= n_layers]
    out: dict[int, DepthSplit] = {k: DepthSplit(k, None, (), (), f"{k} IPUs per replica is more than the "
                                                f"{n_layers} layers to place") for k in depths if k > n_layers}
    facts = analysis.facts
    if not usable:
        return OptionSearch(analysis, out, facts.view.recompute)
    problem = SplitProblem(num_ipus=max(usable), budget=budget, training=training)
    # One limit per option set: no table of a higher limit grows its rows afterwards.
    table = analysis.range_table(budget, link_bytes_per_second, lazy=True, work=work, regrow=False)
    copies = copy_buffers(table)  # each range's copy buffers, once for the suffix search and every depth's solve
    suffixes = suffix_table(table, problem, float(budget), max(usable), copies=copies)
    traffic_table = traffic if traffic is not None else TrafficTable.of(analysis)
    options = analysis.options.training
    off_chip = training and options.optimizer_state == "off-chip"
    fitting = [k for k in usable if suffixes.whole(k) != _INF]
    values = first_values(table, problem) if fitting else None  # every range's, once for all the depths
    # Each depth's floor on objective 1, from one pass for every depth (a depth's does not depend on the others).
    floors = value_floors(table, problem, values=values) if values is not None else None
    for k in usable:
        if k not in fitting:
            out[k] = DepthSplit(k, None, (), (), f"no split over {k} IPUs fits in {budget:,} bytes per tile")
            continue
        # The split --solve --exact-ipus gives: fastest first (the objectives in their order), the same ties.
        # The suffix search's table (bound by the budget, the table's limit) says which stages are on no whole split.
        bounds = exact_optimum(table, dataclasses.replace(problem, num_ipus=k, exact_ipus=True), values, floors,
                               copies=copies, suffixes=suffixes)
        split = _split_result(analysis, table, bounds, budget)
        out[k] = DepthSplit(k, split, bounds, traffic_table.of_stages(table, bounds, off_chip, options.shard))
    return OptionSearch(analysis, out, facts.view.recompute, traffic_table)


def _split_result(analysis: Analysis, table: ProfileRanges, bounds: Bounds, budget: int) -> SplitResult:
    """The split's exact per-IPU figures (:func:`popliner.pipeline.range_figure`), as a solve reports them."""
    facts = analysis.facts
    stages = []
    for k, (i, j) in enumerate(bounds):
        # The range's model figure and stash entry from the table's running sets (memoised).
        stages.append(stage_result(range_figure(facts, i, j, k, len(bounds), table), analysis.layer_names, budget))
    return SplitResult("dp", "OPTIMAL", analysis.mode, len(bounds), budget, tuple(stages),
                       note="popliner plan: the fastest split that fits (largest stage cycles), then the least "
                            "memory on the fullest IPU, then the fewest bytes between IPUs (as --solve --exact-ipus)")


@dataclass(frozen=True, eq=False)
class TrafficTable:
    """Per operation, the weights and optimizer-state variables it uses: a CSR over those entries only.

    A weight is always live, no optimizer state, and used both by a forward
    operation and by a weight update (its gradient, of its size, is
    all-reduced); optimizer state is popliner's (docs/solvers.md). Neither
    depends on the recomputation, the head placement or where the state
    lives, so one table serves every option set of a profile.

    The entries name the table's own variables (``slot``: their positions
    among the distinct variables of every entry). A stage's figures are sums
    over the DISTINCT variables of its operations (a variable several
    operations or layers use counts once per IPU): :class:`_RangeSums` gives
    them for every range of a layering at once.
    """

    ptr: np.ndarray
    slot: np.ndarray  # per entry: its variable's position among the table's distinct variables
    weight: np.ndarray  # per distinct variable of the table: a weight (else optimizer state)
    nbytes: np.ndarray  # per distinct variable of the table, as profiled (not divided over shards)
    #: Per layering of the operations (option sets often share one): its range sums.
    _sums: dict[bytes, _RangeSums] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, analysis: Analysis) -> TrafficTable:
        facts = analysis.facts
        ops = facts.ops
        count = facts.profile.variables.count
        if not facts.training:
            return cls(np.zeros(ops.count + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, bool),
                       np.zeros(0, np.int64))
        view = facts.view
        state = np.asarray(view.optimizer_state, bool)
        weights = np.asarray(view.weights, bool)  # found with the state, in one pass over the entries
        state_users = np.ones(ops.count, bool)
        if analysis.base.state_off_chip:
            # Compiled off chip: the state is no always-live variable but what the update's remote loads and
            # stores move; an IPU streams what its own loads and stores move (not what its updaters read).
            state = state | streamed_state_variables(ops, analysis.is_backward, analysis.profile.contexts, count)
            state_users = remote_update_operations(ops, analysis.is_backward, analysis.profile.contexts)
            weights = weights & ~state
        # The kept entries: a weight's, or the state's of a user (every operation, unless compiled off chip).
        entries = flagged_entries(weights | state, ops.var_idx)
        if not state_users.all():
            owner = np.searchsorted(ops.var_ptr, entries, side="right") - 1
            entries = entries[weights[ops.var_idx[entries]] | state_users[owner]]
        ptr = np.searchsorted(entries, ops.var_ptr).astype(np.int64)  # each operation's first kept entry
        var = ops.var_idx[entries]
        del entries
        # The distinct variables in order, and each entry's position among them: a mask over the variables (no sort).
        mark = np.zeros(count, bool)
        mark[var] = True
        slot = np.cumsum(mark, dtype=np.int32 if count < 2**31 else np.int64)[var]
        slot -= 1  # in place: no second column over every variable
        distinct = np.flatnonzero(mark)
        return cls(ptr, slot, weights[distinct], np.asarray(analysis.profile.variables.bytes)[distinct])

    def of_stages(self, table: ProfileRanges, bounds: Bounds, off_chip: bool, shard: int) -> tuple[IpuTraffic, ...]:
        """Per stage ``(i, j)``: gradient bytes, and (off chip) this replica's share of the optimizer state, of the
        range's IPU (:meth:`ProfileRanges.stage_ops`: the operations whose position is in ``i..j``)."""
        positions = table.op_positions()
        key = positions.tobytes()
        sums = self._sums.get(key)
        if sums is None:
            sums = self._sums[key] = _RangeSums.of(self, positions, table.num_layers)
        return tuple(IpuTraffic(sums.total(self, True, 1, i, j),
                                sums.total(self, False, shard, i, j) if off_chip else 0) for i, j in bounds)

    def shares(self, weights: bool, shard: int) -> np.ndarray:
        """Per variable: a weight's bytes (its gradient's), else 0; or a state variable's share, else 0."""
        if weights:
            return np.where(self.weight, self.nbytes, 0)
        # Rounded up per variable, as sharding does; one replica holds it all (no division over millions).
        return np.where(self.weight, 0, self.nbytes if shard == 1 else -(-self.nbytes // shard))


@dataclass(frozen=True, eq=False)
class _RangeSums:
    """A traffic table's distinct-variable sums over every range of one layering, each read in O(1).

    Each (variable, position it is used at) is a pair, with the variable's
    previous position (-1: none). The distinct variables of range ``i..j`` are
    the pairs at a position in ``i..j`` whose previous one is before ``i``: a
    variable used in the range has exactly one such pair, at its first
    position there. So a range's sum is a sum over a rectangle of (position,
    previous position + 1), read from 2-D prefix sums. Nearly every variable
    is used at one position only (a pair with no previous one): those are
    kept as their position alone.
    """

    alone: np.ndarray  # per variable: its position when it is used at one only, else ``positions``
    cell: np.ndarray  # per pair of the others: position * (positions + 1) + previous position + 1
    slot: np.ndarray  # per pair of the others: the variable
    positions: int
    #: Per (weights or state, shard): the prefix sums, worked out when first read.
    _prefix: dict[tuple[bool, int], list[list[int]]] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, traffic: TrafficTable, op_position: np.ndarray, positions: int) -> _RangeSums:
        # Each variable's first and last position (positions are layers: int16 while they fit, a column over every
        # entry and one over every variable, the latter kept).
        small = np.int16 if positions < 2**15 else np.int32
        # Plain scatters of each operation's position, in order and back (csr_span), not a minimum and a maximum
        # per entry.
        first, last = csr_span(traffic.ptr, traffic.slot, np.arange(traffic.ptr.size - 1),
                               np.asarray(op_position, np.int64), traffic.nbytes.size, small, lo_none=positions)
        several = first < last
        if not several.any():
            return cls(first, np.zeros(0, np.int64), np.zeros(0, np.int64), positions)
        # The others: their distinct (variable, position) pairs in order, each after its variable's previous one.
        at = np.repeat(np.asarray(op_position, small), np.diff(traffic.ptr))
        shared = several[traffic.slot]
        pairs = sorted_unique(traffic.slot[shared].astype(np.int64) * positions + at[shared])
        slot, position = np.divmod(pairs, positions)
        previous = np.full(pairs.size, -1, np.int64)
        same = slot[1:] == slot[:-1]
        previous[1:][same] = position[:-1][same]
        first[several] = positions
        return cls(first, position * (positions + 1) + previous + 1, slot, positions)

    def total(self, traffic: TrafficTable, weights: bool, shard: int, i: int, j: int) -> int:
        """The sum over range ``i..j``'s distinct weights (gradient bytes), else its state's shares."""
        prefix = self._prefix.get((weights, shard))
        if prefix is None:
            prefix = self._prefix[(weights, shard)] = self._prefix_sums(traffic.shares(weights, shard))
        return prefix[j + 1][i] - prefix[i][i]

    def _prefix_sums(self, shares: np.ndarray) -> list[list[int]]:
        """``[p][i]``: the sum over the pairs at a position before ``p`` whose previous position is before ``i``."""
        n = self.positions
        # float64 bincounts, not additions per entry: exact while the bytes of all variables are below 2**53.
        alone = np.bincount(self.alone, weights=shares, minlength=n + 1).astype(np.int64)  # the last: several
        cells = np.bincount(self.cell, weights=shares[self.slot], minlength=n * (n + 1)).astype(np.int64)
        cells = cells.reshape(n, n + 1)
        cells[:, 0] += alone[:n]
        grid = np.cumsum(np.cumsum(cells, axis=1), axis=0)
        # Python integers: no overflow in the differences, and the answers are plain ints.
        return [[0] * (n + 1), *grid.tolist()]
