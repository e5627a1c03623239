"""Dynamic programming min-max split over a range table.

Exact for the first objective (:mod:`popliner.solvers.objective`: the largest stage cost) over contiguous
splits; used to cross-check CP-SAT and to seed it. ``best[k][j]`` is the
smallest possible largest cost of layers ``0..j`` in ``k+1`` stages.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from popliner.deadline import OutOfTime, check_deadline
from popliner.pipeline import (
    RangeCosts,
    copy_buffer_per_tile,
    extra_stash_entries,
    grows_past_limit,
    position_memory,
    range_boundaries,
)
from popliner.solvers.objective import MEMORY, Objective, objective_order
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["OutOfTime", "dp_bounds", "dp_for_stages", "dp_per_count"]


def dp_bounds(table: RangeCosts, problem: SplitProblem, objective: Objective | None = None,
              deadline: float | None = None) -> tuple[Bounds, float] | None:
    """Optimal stages (``(first, last)`` pairs) and their largest value, or None if none fits.

    ``objective`` (a ``max`` one; default: the problem's first) is what is minimised.
    Past ``deadline`` it raises :class:`OutOfTime` with the best found so far.
    """
    best: tuple[Bounds, float] | None = None
    for found in dp_per_count(table, problem, objective, deadline).values():
        if found is not None and (best is None or found[1] < best[1]):
            best = found
    return best


def dp_per_count(table: RangeCosts, problem: SplitProblem, objective: Objective | None = None,
                 deadline: float | None = None) -> dict[int, tuple[Bounds, float] | None]:
    """The optimal split for each stage count the problem allows (exactly ``num_ipus`` when ``exact_ipus``).

    A count whose first stage alone is above the best value of a smaller
    count is not searched (None): its optimum is at least that first stage's,
    so it can neither be the optimum nor tie with it.
    """
    objective = objective or objective_order(table, problem.objectives)[0]
    counts = [problem.num_ipus] if problem.exact_ipus else range(1, problem.num_ipus + 1)
    out: dict[int, tuple[Bounds, float] | None] = {}
    best = math.inf
    for k in counts:
        try:
            check_deadline(deadline)
            if k <= table.num_layers and _first_stage_floor(table, problem, k, objective) > best:
                out[k] = None
                continue
            out[k] = found = dp_for_stages(table, problem, k, objective, deadline)
        except OutOfTime as stop:
            known = [f for f in out.values() if f is not None]
            raise OutOfTime(min(known, key=lambda f: f[1]) if known else None) from stop
        if found is not None:
            best = min(best, found[1])
    return out


def _copy_buffers(table: RangeCosts, training: bool) -> Callable[[int, int], int]:
    """Per tile, the copy buffers of range ``i..j`` (as :func:`position_memory` adds them), each computed once."""
    memo: dict[tuple[int, int], int] = {}

    def copies(i: int, j: int) -> int:
        hit = memo.get((i, j))
        if hit is None:
            hit = memo[(i, j)] = copy_buffer_per_tile(*range_boundaries(table, i, j), table.tiles, training)
        return hit

    return copies


def _first_stage_floor(table: RangeCosts, problem: SplitProblem, stages: int, objective: Objective) -> float:
    """A lower bound on the optimum with ``stages`` stages: the smallest value any first stage can have.

    The first stage is ``0..j`` at position 0, with ``j = n-1`` for one stage
    and ``j <= n - stages`` otherwise (every other stage holds a layer).
    """
    if objective is not MEMORY:
        return -math.inf  # a bound on memory says nothing of another objective
    n = table.num_layers
    ends = [n - 1] if stages == 1 else range(n - stages + 1)
    return min((position_memory(table, 0, j, 0, stages, problem.training) for j in ends), default=math.inf)


def dp_for_stages(table: RangeCosts, problem: SplitProblem, stages: int,
                  objective: Objective | None = None, deadline: float | None = None) -> tuple[Bounds, float] | None:
    """Optimal split into exactly ``stages`` stages, or None when none fits (:class:`OutOfTime` past ``deadline``)."""
    value_of = (objective or objective_order(table, problem.objectives)[0]).stage_value
    n = table.num_layers
    if stages > n:
        return None
    if grows_past_limit(table, 0, 0, 0, stages, problem.training):
        # The first stage holds layer 0 and cannot fit even that with its stash entries at this
        # depth: nothing fits (the loops below would find the same, after visiting every range).
        return None
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    inf = math.inf
    limit = table.limit
    copies = _copy_buffers(table, problem.training)
    # For each j, the largest layer after which a stage must end that lies before j: no range may cross it.
    cut = [max((p for p in problem.split_after if p < j), default=-1) for j in range(n)]
    best = [[inf] * n for _ in range(stages)]
    back = [[-1] * n for _ in range(stages)]
    for k in range(stages):
        check_deadline(deadline)
        # What grows_past_limit and position_memory read, once per range: the stash entries of position k.
        extra = extra_stash_entries(k, stages, table.head_wraps) if problem.training else 0
        for j in range(n):
            if j < n - 1 and (k == stages - 1 or not problem.allowed_split(j, forbidden)):
                continue  # only the last stage ends at the last layer; splits must be allowed
            for i in range(j, -1, -1):
                if j - i + 1 < problem.min_layers:
                    continue
                if i <= cut[j]:
                    break
                base = table.memory(i, j, extra)
                if base == inf:
                    break  # over the limit before its copy buffers: longer ranges (smaller i) only use more
                if (i == 0) != (k == 0):
                    continue  # the first stage starts at layer 0, and only it does
                prev = 0.0 if k == 0 else best[k - 1][i - 1]
                if prev == inf:
                    continue
                total = base + copies(i, j)
                if total > limit:
                    continue  # over the limit with its copy buffers; a longer range may still fit
                value = max(prev, value_of(table, i, j, total))
                if value < best[k][j]:
                    best[k][j], back[k][j] = value, i
    if best[stages - 1][n - 1] == inf:
        return None
    bounds: list[tuple[int, int]] = []
    j = n - 1
    for k in range(stages - 1, -1, -1):
        i = back[k][j]
        bounds.append((i, j))
        j = i - 1
    return tuple(reversed(bounds)), best[stages - 1][n - 1]
