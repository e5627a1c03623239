"""The tests' oracle for the exact solver: the same split problem as a CP-SAT model (OR-Tools).

popliner's exact solver is the lexicographic DP (:mod:`popliner.solvers.lexdp`); this
independent statement of the problem is what the tests hold it against.

Contiguous stages, memory a hard limit, lexicographic objective.

For a given number of stages K the model picks one range per stage position
``k``: a path from layer 0 to the last layer through the feasible ranges
(ranges over the memory limit for their position are never variables).
Objectives, in the order :func:`popliner.solvers.objective.objective_order`
gives (by default: the largest stage cost, the largest worst-tile memory, the
bytes crossing stage boundaries), each solved with the previous one fixed.

"At most N" IPUs solves every K in 1..N and keeps the best. Every solve has a
time limit and a fixed seed, runs one worker and is bounded in deterministic
time too, so the same inputs give the same split.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from popliner.pipeline import RangeCosts, position_memory
from popliner.solvers.dp import dp_for_stages
from popliner.solvers.edges import position_edges
from popliner.solvers.objective import Objective, objective_order
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["IlpOutcome", "ilp_bounds"]


@dataclass(frozen=True)
class IlpOutcome:
    bounds: Bounds
    objectives: tuple[int, int, int]
    optimal: bool
    bound: float  # best proven lower bound on the first objective
    gap: float  # (objective - bound) / objective on the first objective
    models: int


def ilp_bounds(table: RangeCosts, problem: SplitProblem, *, time_limit: float = 60.0, seed: int = 0,
               hints: Sequence[Bounds] = (), prune: bool = True,
               per_count: Mapping[int, tuple[Bounds, float] | None] | None = None) -> IlpOutcome | None:
    """The best split found within ``time_limit`` seconds, or None when none fits.

    The exact DP gives the optimum of objective 1 for every stage count first:
    a count that cannot reach it can never win the lexicographic order, so
    CP-SAT only runs for the counts that can, and (with ``prune``) only over
    ranges whose cost is within that optimum; ``prune=False`` lets CP-SAT find
    objective 1 on its own (the cross-check against the DP in the tests).
    When time runs out, the best of the DP splits and the ``hints`` is
    returned as FEASIBLE. ``per_count`` passes in that DP when the caller has
    already run it (:func:`popliner.solvers.dp.dp_per_count`).
    """
    deadline = time.monotonic() + time_limit  # the DP below counts against the limit too
    counts = list(problem.stage_counts)
    if per_count is None:  # else the caller's exact DP per count (dp_per_count), already done
        per_count = {k: dp_for_stages(table, problem, k) for k in counts if k <= table.num_layers}
    reachable = {k: found for k, found in per_count.items() if found is not None}
    if not reachable:
        return None  # the DP is exact: no stage count fits
    target = min(found[1] for found in reachable.values())
    candidates = [k for k, found in sorted(reachable.items()) if found[1] == target]
    best: IlpOutcome | None = None
    all_proved = True
    for n, k in enumerate(candidates):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            all_proved = False
            break
        seeds = [reachable[k][0], *(h for h in hints if len(h) == k)]
        outcome, _ = _solve_k(table, problem, k, remaining / (len(candidates) - n), seed, seeds,
                              target if prune else math.inf)
        if outcome is None:
            all_proved = False
            continue
        all_proved &= outcome.optimal
        if best is None or outcome.objectives < best.objectives:
            best = outcome
    for split in [*(found[0] for found in reachable.values()), *hints]:
        value = hint_objectives(table, problem, split)
        if value is not None and (best is None or value < best.objectives):
            best = IlpOutcome(split, value, False, float(target), 0.0, len(counts))
            all_proved = False
    if best is None:  # pragma: no cover - the DP splits are always candidates
        return None
    gap = (best.objectives[0] - target) / best.objectives[0] if best.objectives[0] else 0.0
    return IlpOutcome(best.bounds, best.objectives, all_proved and best.optimal, float(target), max(gap, 0.0),
                      len(candidates))


def hint_objectives(table: RangeCosts, problem: SplitProblem, bounds: Bounds) -> tuple[int, int, int] | None:
    """The three objectives of a given split, or None if it breaks a limit."""
    k = len(bounds)
    if k == 0 or k > problem.num_ipus or (problem.exact_ipus and k != problem.num_ipus):
        return None
    order = objective_order(table, problem.objectives)
    values: list[tuple[int, ...]] = []
    for position, (i, j) in enumerate(bounds):
        mem = position_memory(table, i, j, position, k, problem.training)
        if mem == math.inf:
            return None
        values.append(tuple(int(o.stage_value(table, i, j, mem)) for o in order))
    a, b, c = (_combine(o, [v[n] for v in values]) for n, o in enumerate(order))
    return a, b, c


def _combine(objective: Objective, values: Sequence[int]) -> int:
    return max(values) if objective.combine == "max" else sum(values)


@dataclass(frozen=True)
class _Edge:
    position: int
    first: int
    last: int
    values: tuple[int, ...]  # each objective's figure for this range at this position


def _edges(table: RangeCosts, problem: SplitProblem, stages: int, cost_cap: float = math.inf) -> list[_Edge]:
    order = objective_order(table, problem.objectives)
    rows = position_edges(table, problem, stages, order, cost_cap, None)
    return [_Edge(k, i, j, values) for k, row in enumerate(rows) for i, j, values in row]


def _solve_k(table: RangeCosts, problem: SplitProblem, stages: int, time_limit: float, seed: int,
             hints: Sequence[Bounds], cost_cap: float = math.inf) -> tuple[IlpOutcome | None, bool]:
    """Best split with exactly ``stages`` stages, and whether "none" was proved.

    ``cost_cap`` leaves out ranges whose cost is above it (the DP's optimum of
    objective 1): they cannot be part of any lexicographically optimal split.
    """
    edges = _edges(table, problem, stages, cost_cap)
    if not edges:
        return None, True
    # Imported here: OR-Tools takes a good part of a second to import, which a greedy solve need not pay.
    from ortools.sat.python import cp_model

    model = cp_model.CpModel()
    x = [model.new_bool_var(f"stage{e.position}_layers{e.first}_{e.last}") for e in edges]
    by_position: list[list[int]] = [[] for _ in range(stages)]
    for idx, e in enumerate(edges):
        by_position[e.position].append(idx)

    # Each position holds exactly one range.
    for members in by_position:
        if not members:
            return None, True
        model.add_exactly_one(x[m] for m in members)
    # Consecutive positions join up: stage k+1 starts right after stage k ends.
    n = table.num_layers
    for k in range(stages - 1):
        for boundary in range(1, n):
            ending = [x[m] for m in by_position[k] if edges[m].last == boundary - 1]
            starting = [x[m] for m in by_position[k + 1] if edges[m].first == boundary]
            model.add(sum(ending) == sum(starting))
    # Pinned splits: some stage ends exactly there.
    for p in problem.split_after:
        if p < n - 1:
            model.add(sum(x[m] for m, e in enumerate(edges) if e.last == p) == 1)

    order = objective_order(table, problem.objectives)
    objectives: list[Any] = []
    for idx, o in enumerate(order):
        if o.combine == "max":  # the worst stage: a variable at least every position's figure
            objectives.append(model.new_int_var(0, max(e.values[idx] for e in edges), f"max_{o.name}"))
    for members in by_position:
        # Exactly one range per position, so the weighted sum is that range's figure.
        for idx, worst in enumerate(objectives):
            model.add(worst >= sum(edges[m].values[idx] * x[m] for m in members))
    objectives += [sum(e.values[idx] * x[m] for m, e in enumerate(edges) if e.values[idx])
                   for idx, o in enumerate(order) if o.combine == "sum"]

    if hints:
        chosen = {(k, a, b) for k, (a, b) in enumerate(hints[0])}
        for m, e in enumerate(edges):
            model.add_hint(x[m], (e.position, e.first, e.last) in chosen)

    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = max(time_limit / 3, 0.01)
    solver.parameters.max_deterministic_time = max(time_limit / 3, 0.01)

    optimal = True
    values: list[int] = []
    bound = 0.0
    for phase, objective in enumerate(objectives):
        model.minimize(objective)
        status = solver.solve(model)
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if phase == 0:
                return None, status == cp_model.INFEASIBLE
            break
        value = int(round(solver.objective_value))
        if phase == 0:
            bound = solver.best_objective_bound
        optimal &= status == cp_model.OPTIMAL
        values.append(value)
        # Keep this optimum while improving the next objective; hint the answer.
        model.add(objective <= value)
        model.clear_hints()  # type: ignore[no-untyped-call]
        for m in range(len(edges)):
            model.add_hint(x[m], bool(solver.value(x[m])))
        chosen_bounds = tuple(
            (edges[m].first, edges[m].last) for m in sorted(range(len(edges)), key=lambda m: edges[m].position)
            if solver.value(x[m])
        )
    while len(values) < 3:
        values.append(_fallback(order[len(values)], len(values), edges, chosen_bounds))
    gap = (values[0] - bound) / values[0] if values[0] else 0.0
    return IlpOutcome(chosen_bounds, (values[0], values[1], values[2]), optimal, bound, max(gap, 0.0), 1), False


def _fallback(objective: Objective, idx: int, edges: list[_Edge], bounds: Bounds) -> int:
    """Objective value of ``bounds`` for a phase that did not finish in time."""
    chosen = [e for e in edges if e.position < len(bounds) and bounds[e.position] == (e.first, e.last)]
    return _combine(objective, [e.values[idx] for e in chosen])
