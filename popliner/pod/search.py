"""Per training option set: one range table, one suffix search, and the fastest split for every depth that fits.

The suffix search (:mod:`popliner.solvers.suffix`) reads each range of the
table once and answers every stage count at once: ``best[K][0]`` says
whether K IPUs fit, and its ``edges`` keep every range that can be a stage
of a fitting split. A min-max DP over those edges then gives, per K, the
split with the smallest slowest stage (compute plus received transfer,
popliner's first objective), and among those the one with the least
memory on its fullest IPU. Only the chosen splits' stages get their exact
per-tile figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.analysis import Analysis
from popliner.arrays import gather_csr
from popliner.memory.ranges import ProfileRanges
from popliner.pipeline import RangeCosts, range_cost, range_figure
from popliner.solvers.problem import Bounds, SplitProblem
from popliner.solvers.result import SplitResult, stage_result
from popliner.solvers.suffix import SuffixTable, suffix_table

__all__ = ["DepthSplit", "IpuTraffic", "OptionSearch", "fastest_bounds", "search_options"]

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
    """One option set's analysis and its splits by depth; what its engine said, kept once the engine is gone."""

    analysis: Analysis
    depths: dict[int, DepthSplit]
    recompute: str  # the mode the engine applied
    head_wraps: bool


def search_options(analysis: Analysis, depths: Sequence[int], budget: int,
                   link_bytes_per_second: float) -> OptionSearch:
    """The fastest fitting split of ``analysis`` (already under its option set) for each of ``depths``."""
    training = analysis.mode == "training"
    n_layers = len(analysis.layer_names) - (1 if analysis.engine.head_wraps else 0)
    usable = [k for k in depths if k <= n_layers]
    out: dict[int, DepthSplit] = {k: DepthSplit(k, None, (), (), f"{k} IPUs per replica is more than the "
                                                f"{n_layers} layers to place") for k in depths if k > n_layers}
    engine = analysis.engine
    if not usable:
        return OptionSearch(analysis, out, engine.view.recompute, engine.head_wraps)
    problem = SplitProblem(num_ipus=max(usable), budget=budget, training=training)
    table = ProfileRanges(analysis.engine, budget, link_bytes_per_second, lazy=True)
    suffixes = suffix_table(table, problem, float(budget), max(usable))
    weights, state = _weight_and_state(analysis)
    for k in usable:
        if suffixes.whole(k) == _INF:
            out[k] = DepthSplit(k, None, (), (), f"no split over {k} IPUs fits in {budget:,} bytes per tile")
            continue
        bounds = fastest_bounds(table, suffixes, k)
        split = _split_result(analysis, table, bounds, budget)
        traffic = tuple(_traffic(analysis, table, i, j, weights, state) for i, j in bounds)
        out[k] = DepthSplit(k, split, bounds, traffic)
    return OptionSearch(analysis, out, engine.view.recompute, engine.head_wraps)


def fastest_bounds(table: RangeCosts, suffixes: SuffixTable, stages: int) -> Bounds:
    """The split into ``stages`` stages with the smallest largest stage cost, then the least largest memory.

    Over the ranges the suffix search kept (``edges[(r, i)]``: every range
    from layer ``i`` with ``r`` stages left whose memory fits and after
    which the rest fits in ``r - 1`` stages), so every split found fits.
    """
    n = table.num_layers
    edges = suffixes.edges

    def cost(i: int, j: int, memory: float) -> float:
        return float(range_cost(table, i, j)) if table.has_cycles else memory

    slowest: dict[tuple[int, int], float] = {(0, n): -_INF}
    for r in range(1, stages + 1):  # fewest stages left first: each reads only r - 1
        for i in range(n - 1, -1, -1):
            if (i == 0) != (r == stages):
                continue  # only the first stage starts at layer 0
            best = _INF
            for j, memory in edges.get((r, i), ()):
                after = slowest.get((r - 1, j + 1), _INF)
                best = min(best, max(cost(i, j, memory), after))
            if best < _INF:
                slowest[(r, i)] = best
    target = slowest.get((stages, 0), _INF)
    if target == _INF:
        return ()  # pragma: no cover - only called for a stage count the suffix search found to fit
    # Among the splits of that cost, the least memory on the fullest IPU (then the earliest ends).
    fullest: dict[tuple[int, int], tuple[float, int]] = {(0, n): (-_INF, -1)}
    for r in range(1, stages + 1):
        for i in range(n - 1, -1, -1):
            if (i == 0) != (r == stages):
                continue
            pick: tuple[float, int] | None = None
            for j, memory in edges.get((r, i), ()):
                rest = fullest.get((r - 1, j + 1))
                if rest is None or cost(i, j, memory) > target or slowest.get((r - 1, j + 1), _INF) > target:
                    continue
                value = max(memory, rest[0])
                if pick is None or value < pick[0]:
                    pick = (value, j)
            if pick is not None:
                fullest[(r, i)] = pick
    bounds: list[tuple[int, int]] = []
    i = 0
    for r in range(stages, 0, -1):
        j = fullest[(r, i)][1]
        bounds.append((i, j))
        i = j + 1
    return tuple(bounds)


def _split_result(analysis: Analysis, table: ProfileRanges, bounds: Bounds, budget: int) -> SplitResult:
    """The split's exact per-IPU figures (:func:`popliner.pipeline.range_figure`), as a solve reports them."""
    engine = analysis.engine
    stages = []
    for k, (i, j) in enumerate(bounds):
        table.stage_memory(i, j)  # the range's model figure from the table's running set (memoised)
        stages.append(stage_result(range_figure(engine, i, j, k, len(bounds)), analysis.layer_names, budget))
    return SplitResult("dp", "OPTIMAL", analysis.mode, len(bounds), budget, tuple(stages),
                       note="popliner plan: the fastest split that fits (largest stage cycles), then the least "
                            "memory on the fullest IPU")


def _weight_and_state(analysis: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: a weight (its gradient is all-reduced), and optimizer state streamed from off chip.

    A weight is always live, no optimizer state, and used both by a
    forward operation and by a weight update. In inference neither exists.
    """
    engine = analysis.engine
    count = engine.profile.variables.count
    if not engine.training:
        return np.zeros(count, bool), np.zeros(count, bool)
    view, ops = engine.view, engine.ops
    lens = np.diff(ops.var_ptr)
    update = np.repeat(np.asarray(view.is_update, bool), lens)
    forward = np.repeat(~np.asarray(engine.is_backward, bool) & ~np.asarray(view.is_update, bool), lens)
    by_update = np.zeros(count, bool)
    by_update[ops.var_idx[update]] = True
    by_forward = np.zeros(count, bool)
    by_forward[ops.var_idx[forward]] = True
    state = np.asarray(view.optimizer_state, bool)
    weights = np.asarray(engine.always_live_var, bool) & ~state & by_update & by_forward
    off_chip = state if view.options.optimizer_state == "off-chip" else np.zeros(count, bool)
    return weights, off_chip


def _traffic(analysis: Analysis, table: ProfileRanges, i: int, j: int, weights: np.ndarray,
             state: np.ndarray) -> IpuTraffic:
    """Bytes of the weights and of the streamed optimizer state the IPU holding ``i..j`` uses (each once)."""
    ops = analysis.engine.ops
    var = gather_csr(ops.var_ptr, ops.var_idx, table.stage_ops(i, j))
    nbytes = analysis.engine.profile.variables.bytes  # state already divided over the shards
    return IpuTraffic(_distinct_bytes(var[weights[var]], nbytes), _distinct_bytes(var[state[var]], nbytes))


def _distinct_bytes(var: np.ndarray, nbytes: np.ndarray) -> int:
    """Bytes of the distinct variables in ``var`` (a variable several operations use counts once).

    Sorting the few selected entries is far cheaper than a set over all of the stage's entries.
    """
    if var.size == 0:
        return 0
    var = np.sort(var)
    keep = np.ones(var.size, bool)
    keep[1:] = var[1:] != var[:-1]
    return int(nbytes[var[keep]].sum())
