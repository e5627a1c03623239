"""Exact split with CP-SAT: contiguous stages, memory a hard limit, lexicographic objective.

For a given number of stages K the model picks one range per stage position
``k``: a path from layer 0 to the last layer through the feasible ranges
(ranges over the memory limit for their position are never variables).
Objectives, in order, each solved with the previous one fixed:

1. the largest stage cost (cycles plus received transfer when the profile
   has cycles, else the largest stage memory);
2. the largest worst-tile memory;
3. the bytes crossing stage boundaries.

"At most N" IPUs solves every K in 1..N and keeps the best. Every solve has a
time limit and a fixed seed, runs one worker and is bounded in deterministic
time too, so the same inputs give the same split.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass

from ortools.sat.python import cp_model

from popliner.solvers.dp import stage_cost
from popliner.solvers.ranges import RangeCosts, SplitProblem, extra_stash_entries

__all__ = ["IlpOutcome", "ilp_bounds"]

Bounds = tuple[tuple[int, int], ...]
_OK = (cp_model.OPTIMAL, cp_model.FEASIBLE)


@dataclass(frozen=True)
class IlpOutcome:
    bounds: Bounds
    objectives: tuple[int, int, int]
    optimal: bool
    bound: float  # best proven lower bound on the first objective
    gap: float  # (objective - bound) / objective on the first objective
    models: int


def ilp_bounds(table: RangeCosts, problem: SplitProblem, *, time_limit: float = 60.0, seed: int = 0,
               hints: Sequence[Bounds] = ()) -> IlpOutcome | None:
    """The best split found within ``time_limit`` seconds, or None when none fits."""
    counts = [problem.num_ipus] if problem.exact_ipus else list(range(1, problem.num_ipus + 1))
    counts = [k for k in counts if k <= table.num_layers]
    deadline = time.monotonic() + time_limit
    best: IlpOutcome | None = None
    all_proved = True
    for n, k in enumerate(counts):
        remaining = max(deadline - time.monotonic(), 0.05)
        share = remaining / (len(counts) - n)
        outcome = _solve_k(table, problem, k, share, seed, [h for h in hints if len(h) == k])
        if outcome is None:
            continue  # infeasible with k stages (proved, or none found in time)
        all_proved &= outcome.optimal
        if best is None or outcome.objectives < best.objectives:
            best = outcome
    if best is None:
        return None
    return IlpOutcome(best.bounds, best.objectives, all_proved and best.optimal, best.bound, best.gap, len(counts))


@dataclass(frozen=True)
class _Edge:
    position: int
    first: int
    last: int
    cost: int
    memory: int
    crossing: int


def _edges(table: RangeCosts, problem: SplitProblem, stages: int) -> list[_Edge]:
    n = table.num_layers
    forbidden = table.forbidden_splits(problem)
    edges = []
    for k in range(stages):
        extra = extra_stash_entries(k, stages) if problem.training else 0
        starts = [0] if k == 0 else range(1, n)
        for i in starts:
            for j in range(i + problem.min_layers - 1, n):
                mem = table.memory(i, j, extra)
                if mem == math.inf:
                    break
                if any(i <= p < j for p in problem.split_after):
                    break
                last = j == n - 1
                if last != (k == stages - 1):
                    continue
                if not last and not problem.allowed_split(j, forbidden):
                    continue
                cost = stage_cost(table, i, j, extra)
                edges.append(_Edge(k, i, j, int(cost), int(mem), table.crossing(j)))
    return edges


def _solve_k(table: RangeCosts, problem: SplitProblem, stages: int, time_limit: float, seed: int,
             hints: Sequence[Bounds]) -> IlpOutcome | None:
    edges = _edges(table, problem, stages)
    if not edges:
        return None
    model = cp_model.CpModel()
    x = [model.new_bool_var(f"stage{e.position}_layers{e.first}_{e.last}") for e in edges]
    by_position: list[list[int]] = [[] for _ in range(stages)]
    for idx, e in enumerate(edges):
        by_position[e.position].append(idx)

    # Each position holds exactly one range.
    for members in by_position:
        if not members:
            return None
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

    cost_hi = max(e.cost for e in edges)
    mem_hi = max(e.memory for e in edges)
    max_cost = model.new_int_var(0, cost_hi, "max_stage_cost")
    max_mem = model.new_int_var(0, mem_hi, "max_worst_tile_bytes")
    for members in by_position:
        # Exactly one range per position, so the weighted sum is that range's figure.
        model.add(max_cost >= sum(edges[m].cost * x[m] for m in members))
        model.add(max_mem >= sum(edges[m].memory * x[m] for m in members))
    crossing = sum(e.crossing * x[m] for m, e in enumerate(edges) if e.last < n - 1)

    for hint in hints:
        chosen = {(k, a, b) for k, (a, b) in enumerate(hint)}
        for m, e in enumerate(edges):
            model.add_hint(x[m], (e.position, e.first, e.last) in chosen)
        break

    solver = cp_model.CpSolver()
    solver.parameters.random_seed = seed
    solver.parameters.num_workers = 1
    solver.parameters.max_time_in_seconds = max(time_limit / 3, 0.01)
    solver.parameters.max_deterministic_time = max(time_limit / 3, 0.01)

    optimal = True
    values: list[int] = []
    bound = 0.0
    for phase, objective in enumerate((max_cost, max_mem, crossing)):
        model.minimize(objective)
        status = solver.solve(model)
        if status not in _OK:
            if phase == 0:
                return None
            break
        value = int(round(solver.objective_value))
        if phase == 0:
            bound = solver.best_objective_bound
        optimal &= status == cp_model.OPTIMAL
        values.append(value)
        # Keep this optimum while improving the next objective; hint the answer.
        model.add(objective <= value)
        model.clear_hints()
        for m in range(len(edges)):
            model.add_hint(x[m], bool(solver.value(x[m])))
        chosen_bounds = tuple(
            (edges[m].first, edges[m].last) for m in sorted(range(len(edges)), key=lambda m: edges[m].position)
            if solver.value(x[m])
        )
    while len(values) < 3:
        values.append(_fallback(values, edges, chosen_bounds, n))
    gap = (values[0] - bound) / values[0] if values[0] else 0.0
    return IlpOutcome(chosen_bounds, (values[0], values[1], values[2]), optimal, bound, max(gap, 0.0), 1)


def _fallback(values: list[int], edges: list[_Edge], bounds: Bounds, n: int) -> int:
    """Objective value of ``bounds`` for a phase that did not finish in time."""
    chosen = [e for e in edges if e.position < len(bounds) and bounds[e.position] == (e.first, e.last)]
    if len(values) == 1:
        return max(e.memory for e in chosen)
    return sum(e.crossing for e in chosen if e.last < n - 1)
