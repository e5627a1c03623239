"""Solve a split for an analysed profile: greedy and/or CP-SAT, then the stage figures."""

from __future__ import annotations

import logging
import time
from typing import Literal

import numpy as np

from popliner.analysis import Analysis
from popliner.memory.overflow import overflow_detail
from popliner.progress import phase
from popliner.solvers.dp import dp_bounds
from popliner.solvers.greedy import greedy_bounds
from popliner.solvers.ilp import ilp_bounds
from popliner.solvers.ranges import ProfileRanges, SplitProblem, extra_stash_entries, stash_depth
from popliner.solvers.result import SplitResult, StageResult

__all__ = ["SolverName", "minimum_ipus", "solve_split", "stage_results"]

log = logging.getLogger(__name__)
SolverName = Literal["greedy", "ilp"]
Bounds = tuple[tuple[int, int], ...]


def solve_split(analysis: Analysis, problem: SplitProblem, *, solver: SolverName = "ilp",
                time_limit: float = 60.0, seed: int = 0, link_bytes_per_second: float = 64e9) -> SplitResult:
    """Split the analysed profile's layers over at most ``problem.num_ipus`` IPUs."""
    t0 = time.perf_counter()
    with phase("building range tables"):
        table = ProfileRanges(analysis, problem.budget, link_bytes_per_second)
        greedy = greedy_bounds(table, problem)
    if solver == "greedy":
        if greedy is None:
            return _infeasible(analysis, problem, "greedy", table, t0)
        bounds, cap, min_layers = greedy
        note = f"greedy: cap {cap:.0%} of the budget, at least {min_layers} layer(s) per stage"
        stages = stage_results(table, problem, bounds)
        return SplitResult("greedy", "GREEDY", analysis.mode, problem.num_ipus, problem.budget, stages,
                           objective=_first_objective(table, stages), wall_seconds=time.perf_counter() - t0,
                           note=note)
    hints = [greedy[0]] if greedy is not None else []
    with phase("building range tables"):
        dp = dp_bounds(table, problem)
    if dp is not None:
        hints.append(dp[0])
    with phase("solving (CP-SAT)"):
        outcome = ilp_bounds(table, problem, time_limit=time_limit, seed=seed, hints=hints)
    if outcome is None:
        return _infeasible(analysis, problem, "ilp", table, t0)
    stages = stage_results(table, problem, outcome.bounds)
    return SplitResult(
        "ilp", "OPTIMAL" if outcome.optimal else "FEASIBLE", analysis.mode, problem.num_ipus, problem.budget,
        stages, objective=float(outcome.objectives[0]), bound=float(outcome.bound), gap=outcome.gap,
        wall_seconds=time.perf_counter() - t0,
        note=("objective: largest stage cycles (compute + received transfer)" if table.has_cycles
              else "objective: largest stage worst-tile bytes (the profile has no cycles)"),
    )


def _first_objective(table: ProfileRanges, stages: tuple[StageResult, ...]) -> float:
    if table.has_cycles:
        return float(max(s.cycles + table.transfer(s.bytes_in) for s in stages))
    return float(max(s.worst_tile_bytes for s in stages))


def _infeasible(analysis: Analysis, problem: SplitProblem, solver: str, table: ProfileRanges,
                t0: float) -> SplitResult:
    hint = infeasibility_reason(table, problem)
    log.warning("no split of %d layers fits on %d IPUs of %d bytes per tile: %s",
                table.num_layers, problem.num_ipus, problem.budget, hint)
    with phase("best-effort split"):
        stages = best_effort(analysis, problem)
    return SplitResult(solver, "INFEASIBLE", analysis.mode, problem.num_ipus, problem.budget, stages,
                       wall_seconds=time.perf_counter() - t0, note=hint)


#: Budget multiples tried, in order, for a best-effort split when nothing fits.
_RELAXATIONS = (1.5, 3.0, 8.0)


def best_effort(analysis: Analysis, problem: SplitProblem) -> tuple[StageResult, ...]:
    """The split over the IPUs asked for whose fullest tile is smallest, for a stage that does not fit.

    Tables are pruned at a relaxed limit (1.5x, 3x, 8x the budget) so that
    the search stays as cheap as a normal solve; every stage over the real
    budget gets its overflow details (tile, step, largest live variables).
    """
    for factor in _RELAXATIONS:
        relaxed = ProfileRanges(analysis, int(problem.budget * factor))
        found = dp_bounds(relaxed, problem, by_memory=True)
        if found is not None:
            return stage_results(relaxed, problem, found[0], explain=True)
    return ()


def infeasibility_reason(table: ProfileRanges, problem: SplitProblem) -> str:
    """Why nothing fits, in terms a user can act on."""
    need = minimum_ipus(table, problem)
    if need is not None:
        return f"it needs at least {need} IPUs at this budget"
    for k, name in enumerate(table.layer_names):
        if table.memory(k, k, 0) > problem.budget:
            worst = table.stage_memory(k, k).worst_bytes
            return (f"layer {name} alone needs {worst:,} bytes on its worst tile"
                    f"{' (with the operations that have no layer)' if k == 0 else ''}")
    return ("no number of IPUs works: every layer fits alone, but the activation stashes of the first IPUs "
            "grow with the pipeline depth (2(K-1-i)+1 entries on IPU i); raise --mem-per-tile, use a smaller "
            "micro-batch or recomputation, or compare with --mode inference")


def minimum_ipus(table: ProfileRanges, problem: SplitProblem) -> int | None:
    """Fewest stages that fit (ignoring the IPU count asked for), or None."""
    for k in range(1, table.num_layers + 1):
        trial = SplitProblem(k, problem.budget, True, problem.min_layers, problem.split_after,
                             problem.same_ipu, problem.keep_shared_together, problem.training)
        if dp_bounds(table, trial) is not None:
            return k
    return None


def stage_results(table: ProfileRanges, problem: SplitProblem, bounds: Bounds,
                  explain: bool = False) -> tuple[StageResult, ...]:
    """Exact figures of each stage of a split, stash included in training.

    With ``explain``, a stage over the budget says on which tile, at which
    step and with which variables it overflows.
    """
    out = []
    count = len(bounds)
    for k, (i, j) in enumerate(bounds):
        mem = table.stage_memory(i, j)
        extra = extra_stash_entries(k, count) if problem.training else 0
        stash = table.stash_per_tile(i, j) * extra if extra else np.zeros(mem.tiles, np.int64)
        total = mem.total_per_tile + stash
        worst = int(np.argmax(total)) if total.size else 0
        fits = int(total.max(initial=0)) <= problem.budget
        detail = None if fits or not explain else overflow_detail(table.analysis.model, table.stage_ops(i, j), worst)
        out.append(StageResult(
            index=k, ipu=k, layers=table.layer_names[i : j + 1], memory=mem.summed(), worst_tile=worst,
            worst_tile_bytes=int(total[worst]) if total.size else 0, stash_bytes=int(stash.sum()),
            stash_entries=stash_depth(k, count) if problem.training else 0, cycles=table.compute(i, j),
            bytes_in=table.crossing(i - 1) if i > 0 else 0, fits=fits, overflow=detail,
        ))
    return tuple(out)


