"""The exact solver: the lexicographic optimum of all three objectives, by dynamic programming.

A split into K stages is a path through a layered graph: node ``(p, i)`` is
"stage position ``p`` starts at layer ``i``", and an edge is a range ``i..j``
that may sit at position ``p`` (:mod:`popliner.solvers.edges`). The objectives
are eliminated in order over those paths; docs/solvers.md ("Exact") gives the
steps, why the result is the tuple a CP-SAT model proves, and the tie-break.
Only orders with every ``max`` objective before the ``sum`` ones are
allowed (:func:`popliner.solvers.objective.objective_order` refuses others).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from popliner.deadline import check_deadline
from popliner.pipeline import RangeCosts
from popliner.solvers.dp import RangeValues, copy_buffers
from popliner.solvers.edges import Edges, position_edges
from popliner.solvers.objective import Objective, objective_order, split_objectives
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["ExactOutcome", "lexicographic_optimum"]


@dataclass(frozen=True)
class ExactOutcome:
    """The optimal split, its three objectives, and objective 1's optimum (the bound it is proved against)."""

    bounds: Bounds
    objectives: tuple[int, int, int]
    bound: float


def lexicographic_optimum(table: RangeCosts, problem: SplitProblem,
                          per_count: Mapping[int, tuple[Bounds, float] | None],
                          deadline: float | None = None, *,
                          range_values: RangeValues | None = None,
                          copies: Callable[[int, int], int] | None = None,
                          suffix_best: Sequence[Sequence[float]] | None = None) -> ExactOutcome | None:
    """The lexicographically optimal split, proved; None when none fits.

    ``per_count``: the exact DP's optimum of objective 1 per stage count
    (:func:`popliner.solvers.dp.dp_per_count`). Past ``deadline`` it raises
    :class:`popliner.deadline.OutOfTime`. ``range_values``: objective 1's
    :class:`popliner.solvers.dp.RangeValues`, and ``copies`` (:func:`popliner.solvers.dp.copy_buffers`), when the
    caller has them; ``suffix_best``: the suffix DP's (:func:`popliner.solvers.dp.dp_for_stages` says which), to
    build no edge on no whole split.
    """
    order = objective_order(table, problem.objectives)
    reachable = {k: found for k, found in per_count.items() if found is not None}
    if not reachable:
        return None
    target = min(found[1] for found in reachable.values())
    best: tuple[tuple[int, int, int], Bounds] | None = None
    candidates = sorted(k for k, found in reachable.items() if found[1] == target)
    # Objective 1's value of each range, once for every count, when it needs no memory (the edges read the values
    # alone and compare them with the target themselves: the caller's uncapped ones serve).
    first = None
    if not order[0].uses_memory:
        first = range_values if range_values is not None else RangeValues(table, order[0], target)
    copies = copies or copy_buffers(table)  # each range's, once for every count
    for k in candidates:
        bounds = _best_of_count(table, problem, k, order, target, deadline, first, copies, suffix_best)
        values = split_objectives(table, problem, bounds) if bounds is not None else None
        if bounds is None or values is None:  # pragma: no cover - the DP found a split of this count within it
            return None
        if best is None or values < best[0]:  # ties: the fewest stages
            best = values, bounds
    assert best is not None  # every candidate count has a split (the DP's)
    values, bounds = best
    return ExactOutcome(bounds, values, float(target))


def _best_of_count(table: RangeCosts, problem: SplitProblem, stages: int,
                   order: tuple[Objective, Objective, Objective], target: float, deadline: float | None,
                   values: RangeValues | None, copies: Callable[[int, int], int],
                   suffix_best: Sequence[Sequence[float]] | None = None) -> Bounds | None:
    """The lexicographically best split into exactly ``stages`` stages whose objective 1 is within ``target``."""
    # Only the edges reached from layer 0 (and, with ``suffix_best``, from which the end is reached): the whole
    # paths, and so every optimum and tie below, are the same.
    edges = position_edges(table, problem, stages, order, target, deadline, values, from_start=True, copies=copies,
                           suffix_best=suffix_best)
    n = table.num_layers
    for idx in range(1, len(order)):
        if order[idx].combine != "max":
            break
        check_deadline(deadline)
        value = _bottleneck(edges, n, idx)
        if value == math.inf:
            return None
        edges = [[e for e in row if e[2][idx] <= value] for row in edges]
    sums = [idx for idx in range(1, len(order)) if order[idx].combine == "sum"]
    check_deadline(deadline)
    return _latest_path(edges, n, sums)


def _bottleneck(edges: Edges, n: int, idx: int) -> float:
    """The smallest largest value of objective ``idx`` over the paths from layer 0 to the end."""
    stages = len(edges)
    after = {n: -math.inf}  # from position p + 1: start layer -> smallest largest value to the end
    for p in range(stages - 1, -1, -1):
        here: dict[int, float] = {}
        for i, j, values in edges[p]:
            rest = after.get(j + 1)
            if rest is not None:
                value = max(values[idx], rest)
                if value < here.get(i, math.inf):
                    here[i] = value
        after = here
    return after.get(0, math.inf)


def _latest_path(edges: Edges, n: int, sums: list[int]) -> Bounds | None:
    """The path with the smallest sums (in order) of the objectives ``sums``; ties: the latest stage ends."""
    stages = len(edges)
    # rest[p][i]: the smallest sums from position p starting at layer i to the end; end[p][i]: the last layer of the
    # stage at p of such a path (of those, the latest).
    rest: list[dict[int, tuple[int, ...]]] = [{} for _ in range(stages + 1)]
    end: list[dict[int, int]] = [{} for _ in range(stages)]
    rest[stages][n] = tuple(0 for _ in sums)
    for p in range(stages - 1, -1, -1):
        after, here, ends = rest[p + 1], rest[p], end[p]
        for i, j, values in edges[p]:
            tail = after.get(j + 1)
            if tail is not None:
                total = tuple([values[idx] + t for idx, t in zip(sums, tail, strict=True)])
                known = here.get(i)
                if known is None or total < known:
                    here[i] = total
                    ends[i] = j
                elif total == known and j > ends[i]:
                    ends[i] = j
    if 0 not in rest[0]:
        return None
    bounds = []
    i = 0
    for p in range(stages):
        bounds.append((i, end[p][i]))
        i = end[p][i] + 1
    return tuple(bounds)
