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
from popliner.arrays import gather_csr
from popliner.memory.ranges import ProfileRanges
from popliner.memory.work import RangeWork
from popliner.ops.remote import remote_update_operations, streamed_state_variables
from popliner.pipeline import range_figure
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
    suffixes = suffix_table(table, problem, float(budget), max(usable))
    traffic_table = traffic if traffic is not None else TrafficTable.of(analysis)
    options = analysis.options.training
    off_chip = training and options.optimizer_state == "off-chip"
    fitting = [k for k in usable if suffixes.whole(k) != _INF]
    values = first_values(table, problem) if fitting else None  # every range's, once for all the depths
    for k in usable:
        if k not in fitting:
            out[k] = DepthSplit(k, None, (), (), f"no split over {k} IPUs fits in {budget:,} bytes per tile")
            continue
        # The split --solve --exact-ipus gives: fastest first (the objectives in their order), the same ties.
        bounds = exact_optimum(table, dataclasses.replace(problem, num_ipus=k, exact_ipus=True), values)
        split = _split_result(analysis, table, bounds, budget)
        out[k] = DepthSplit(k, split, bounds, tuple(traffic_table.of_ops(table.stage_ops(i, j), off_chip, options.shard)
                                                     for i, j in bounds))
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
    among the distinct variables of every entry), so that the distinct ones
    of a set of operations are found by marking a mask that small rather than
    by sorting the set's entries (many operations use each weight).
    """

    ptr: np.ndarray
    slot: np.ndarray  # per entry: its variable's position among the table's distinct variables
    weight: np.ndarray  # per entry: a weight (else optimizer state)
    nbytes: np.ndarray  # per distinct variable of the table, as profiled (not divided over shards)
    #: Figures already worked out, by operations and options (option sets often pick the same stages).
    _known: dict[tuple[bytes, bool, int], IpuTraffic] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, analysis: Analysis) -> TrafficTable:
        facts = analysis.facts
        ops = facts.ops
        count = facts.profile.variables.count
        if not facts.training:
            return cls(np.zeros(ops.count + 1, np.int64), np.zeros(0, np.int64), np.zeros(0, bool),
                       np.zeros(0, np.int64))
        view = facts.view
        lens = np.diff(ops.var_ptr)
        update = np.asarray(view.is_update, bool)
        forward = ~np.asarray(facts.is_backward, bool) & ~update
        by_update = np.zeros(count, bool)
        by_update[ops.var_idx[np.repeat(update, lens)]] = True
        by_forward = np.zeros(count, bool)
        by_forward[ops.var_idx[np.repeat(forward, lens)]] = True
        state = np.asarray(view.optimizer_state, bool)
        state_users = np.ones(ops.count, bool)
        if analysis.base.state_off_chip:
            # Compiled off chip: the state is no always-live variable but what the update's remote loads and
            # stores move; an IPU streams what its own loads and stores move (not what its updaters read).
            state = state | streamed_state_variables(ops, analysis.is_backward, analysis.profile.contexts, count)
            state_users = remote_update_operations(ops, analysis.is_backward, analysis.profile.contexts)
        weights = np.asarray(facts.always_live_var, bool) & ~state & by_update & by_forward
        keep = weights[ops.var_idx] | (state[ops.var_idx] & np.repeat(state_users, lens))
        # Where each operation's kept entries start: the running count of kept entries before its first entry
        # (counts in int32 while they fit: a column over every entry of the operation table).
        ends = np.cumsum(keep, dtype=np.int32 if keep.size < 2**31 else np.int64)[np.maximum(ops.var_ptr - 1, 0)]
        ptr = np.where(ops.var_ptr > 0, ends, 0).astype(np.int64)
        var = ops.var_idx[keep].astype(np.int64)
        # The distinct variables in order, and each entry's position among them: a mask over the variables (no sort).
        mark = np.zeros(count, bool)
        mark[var] = True
        slot = (np.cumsum(mark, dtype=np.int32 if count < 2**31 else np.int64) - 1)[var].astype(np.int64)
        return cls(ptr, slot, weights[var], np.asarray(analysis.profile.variables.bytes)[np.flatnonzero(mark)])

    def of_ops(self, op_idx: np.ndarray, off_chip: bool, shard: int) -> IpuTraffic:
        """Gradient bytes, and (off chip) this replica's share of the optimizer state, of a set of operations."""
        key = (np.asarray(op_idx, np.int64).tobytes(), off_chip, shard)
        found = self._known.get(key)
        if found is None:
            found = self._known[key] = self._of_ops(op_idx, off_chip, shard)
        return found

    def _of_ops(self, op_idx: np.ndarray, off_chip: bool, shard: int) -> IpuTraffic:
        slot = gather_csr(self.ptr, self.slot, op_idx)
        weight = gather_csr(self.ptr, self.weight, op_idx)
        gradients = self.nbytes[self._distinct(slot[weight])]
        state = self.nbytes[self._distinct(slot[~weight])] if off_chip else gradients[:0]
        # The state's share is rounded up per variable, as sharding does.
        return IpuTraffic(int(gradients.sum()), int((-(-state // shard)).sum()))

    def _distinct(self, slot: np.ndarray) -> np.ndarray:
        """Whether each of the table's variables is among ``slot`` (a variable several operations use counts once)."""
        mask = np.zeros(self.nbytes.size, bool)
        mask[slot] = True
        return mask
