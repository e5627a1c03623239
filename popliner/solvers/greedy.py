"""PopLiner's greedy split, as PopLiner states it: each minimum of layers per stage (3, 2, 1) and memory cap
(50%, 60%, ... 100% of the budget) in turn, filling IPU after IPU, with the original's two bends of that
minimum (the unlayered group counts as a layer; a short tail). docs/solvers.md ('Greedy') states the rule
and works an example.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from popliner.pipeline import RangeCosts, extra_stash_entries
from popliner.solvers.dp import copy_buffers
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["CAPS", "MIN_LAYERS", "greedy_bounds", "layers_needed"]

MIN_LAYERS = (3, 2, 1)
CAPS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def greedy_bounds(table: RangeCosts, problem: SplitProblem) -> tuple[Bounds, float, int] | None:
    """Stages as ``(first, last)`` layer pairs, with the cap and minimum that won.

    Constraints the greedy rule cannot express (pins, same-IPU pairs) are
    honoured by refusing a split where it is not allowed: the stage then
    keeps growing, and the attempt fails if that overflows. In training each
    cap plans for K = 1, 2, ... IPUs in turn (docs/solvers.md, 'Greedy', says why).
    """
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    copies = copy_buffers(table)  # each range's, once for every fill
    plans = range(1, problem.num_ipus + 1) if problem.training else [problem.num_ipus]
    for min_layers in MIN_LAYERS:
        for share in CAPS:
            cap = int(share * problem.budget)
            for stages in plans:
                bounds = _fill(table, problem, cap, min_layers, forbidden, stages, copies)
                if bounds is not None:
                    return bounds, share, max(min_layers, problem.min_layers)
    return None


def layers_needed(table: RangeCosts, problem: SplitProblem, start: int, min_layers: int) -> int:
    """Layers (with a name) the stage starting at layer ``start`` must hold under greedy minimum ``min_layers``.

    PopLiner's two bends of its minimum (docs/solvers.md, 'Greedy'); the user's minimum applies as it is,
    capped by the number of layers (a single stage cannot hold more).
    """
    group = 1 if start == 0 and table.has_unlayered else 0
    left = table.num_layers - start + group
    greedy = max(min_layers - group, 1) if left >= min_layers else 1
    return max(greedy, min(problem.min_layers, table.num_layers))


def _fill(table: RangeCosts, problem: SplitProblem, cap: int, min_layers: int,
          forbidden: frozenset[int], stages: int, copies: Callable[[int, int], int]) -> Bounds | None:
    """Fill IPUs in order, planning stashes for ``stages`` IPUs; None when a stage is short or they run out."""
    n = table.num_layers
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n:
        k = len(bounds)
        if k >= stages:
            return None
        end = _furthest_fit(table, problem, start, cap, k, stages, forbidden, copies)
        if end is None or end - start + 1 < layers_needed(table, problem, start, min_layers):
            return None
        bounds.append((start, end))
        start = end + 1
    if problem.exact_ipus and len(bounds) != problem.num_ipus:
        return None
    return tuple(bounds)


def _furthest_fit(table: RangeCosts, problem: SplitProblem, start: int, cap: int, position: int, stages: int,
                  forbidden: frozenset[int], copies: Callable[[int, int], int]) -> int | None:
    """Last layer of the longest allowed range from ``start`` within ``cap`` at ``position`` of ``stages``."""
    best = None
    # position_memory's figure, its stash entries taken once: over the cap, or over the table's limit (inf).
    extra = extra_stash_entries(position, stages, table.head_wraps) if problem.training else 0
    limit = table.limit
    for j in range(start, table.num_layers):
        base = table.memory(start, j, extra)
        if base == math.inf:
            break
        total = base + copies(start, j)
        if total > limit or total > cap:
            break
        if j == table.num_layers - 1 or problem.allowed_split(j, forbidden):
            best = j
        if j in problem.split_after:
            break  # a pinned split: the stage must end here, so no range from ``start`` goes further
    return best
