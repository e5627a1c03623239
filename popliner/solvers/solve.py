"""Solve a split over range costs: greedy or the exact DP, and a best effort when nothing fits.

Plain data in (a :class:`SplitProblem` and :class:`popliner.pipeline.RangeCosts`),
plain data out (a :class:`SplitOutcome`: the stages' layer bounds and how
they were found). :func:`popliner.analysis.solve_split` turns an outcome
into the stages' exact figures.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from popliner.deadline import OutOfTime
from popliner.pipeline import RangeCosts, position_memory
from popliner.progress import phase
from popliner.solvers.dp import RangeValues, copy_buffers, dp_per_count, value_floors
from popliner.solvers.greedy import greedy_bounds
from popliner.solvers.lexdp import lexicographic_optimum
from popliner.solvers.objective import objective_order, split_value
from popliner.solvers.problem import Bounds, SplitProblem
from popliner.solvers.result import TIMEOUT
from popliner.solvers.suffix import SuffixTable, forward_bounds, suffix_table

__all__ = ["BEST_EFFORT_LIMIT", "SolverName", "SplitOutcome", "best_effort", "exact_optimum", "infeasibility_reason",
           "minimum_ipus", "solve_bounds"]

log = logging.getLogger(__name__)
SolverName = Literal["greedy", "ilp"]
#: The largest worst tile of a best-effort split, as a multiple of the budget: beyond it none is given.
BEST_EFFORT_LIMIT = 8.0
#: The exact DP's cap on objective 1 grows by this factor while no split reaches it, at most CAP_STEPS times.
CAP_STEP = 1.25
CAP_STEPS = 8


@dataclass(frozen=True)
class SplitOutcome:
    """What a solve found: the stages' bounds, and for an infeasible problem a best effort and why."""

    solver: str  # "greedy" or "ilp"
    status: str  # "OPTIMAL", "FEASIBLE", "GREEDY" or "INFEASIBLE" (bounds then hold a best-effort split)
    bounds: Bounds
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    note: str = ""


def solve_bounds(table: RangeCosts, problem: SplitProblem, *, solver: SolverName = "ilp", time_limit: float = 60.0,
                 relaxed: Callable[[float], RangeCosts] | None = None,
                 layer_need: Callable[[int], str] | None = None, started: float | None = None) -> SplitOutcome:
    """Split ``table``'s layers over at most ``problem.num_ipus`` IPUs.

    ``relaxed(factor)`` gives the same costs with a limit ``factor`` times the
    budget, for a best-effort split when nothing fits; ``layer_need(k)`` the
    phrase saying what layer ``k`` alone needs, to say which layer is too large.

    ``time_limit`` bounds the whole solve, from ``started`` when given (docs/solvers.md, ``--time-limit``).
    """
    # ``started``: when the caller's solve began (its ``time.monotonic()``), so that what it did
    # before (the memory facts and their training view) counts against the limit too.
    deadline = (time.monotonic() if started is None else started) + time_limit
    if solver == "greedy":
        with phase("building range tables"):
            try:
                greedy = greedy_bounds(table, problem)
            except OutOfTime:  # the table's rows stopped at the deadline: nothing found, nothing proved
                return _out_of_time(table, problem, None, relaxed, layer_need, time_limit, solver, "greedy")
        if greedy is None:
            return _infeasible(table, problem, "greedy", relaxed, layer_need, deadline, time_limit)
        bounds, cap, min_layers = greedy
        return SplitOutcome("greedy", "GREEDY", bounds, objective=first_objective(table, problem, bounds),
                            note=f"greedy: cap {cap:.0%} of the budget, at least {min_layers} layer(s) per stage "
                                 "as PopLiner counts them (the unlayered group is one; fewer on the last)")
    # The greedy split stands in only when the exact DP runs out of time: it is worked out then, not first.
    with phase("building range tables"):
        try:
            # Each range's value of objective 1 when it needs no memory: once for the floor, the DP and the edges.
            values = first_values(table, problem)
            copies = copy_buffers(table)  # each range's copy buffers: once for the DP and the edges
            per_count = _exact_per_count(table, problem, deadline, values=values, copies=copies)
        except OutOfTime as stop:
            return _out_of_time(table, problem, stop.best, relaxed, layer_need, time_limit, "ilp")
    dp = min((f for f in per_count.values() if f is not None), key=lambda f: f[1], default=None)
    with phase("solving (exact DP)"):
        try:
            # The exact DP carried on to every objective in turn.
            outcome = lexicographic_optimum(table, problem, per_count, deadline, range_values=values, copies=copies)
        except OutOfTime:
            return _out_of_time(table, problem, dp, relaxed, layer_need, time_limit, "ilp")
    if outcome is None:
        return _infeasible(table, problem, "ilp", relaxed, layer_need, deadline, time_limit)
    first = objective_order(table, problem.objectives)[0]
    note = (f"objective: {first.title}" + ("" if table.has_cycles else " (the profile has no cycles)")
            + "; proved optimal by the exact DP, each objective in turn (CP-SAT not needed)")
    return SplitOutcome("ilp", "OPTIMAL", outcome.bounds, objective=float(outcome.objectives[0]),
                        bound=outcome.bound, gap=0.0, note=note)


def exact_optimum(table: RangeCosts, problem: SplitProblem, values: RangeValues | None = None,
                  floors: Mapping[int, float] | None = None, *,
                  copies: Callable[[int, int], int] | None = None, suffixes: SuffixTable | None = None) -> Bounds:
    """The exact solver's split (the lexicographic optimum, as ``--solve`` gives it); () when none fits.

    ``values``: :func:`first_values` of the table, when the caller solves it for several stage counts
    (every range's value, the same for each); ``floors``: :func:`popliner.solvers.dp.value_floors` of the
    table under the same problem with these counts and more (a count's floor does not depend on the others:
    one pass gives every count's); ``copies``: :func:`popliner.solvers.dp.copy_buffers` of the table, when the
    caller has them (each range's copy buffers, the same for every count); ``suffixes``: the
    :func:`popliner.solvers.suffix.suffix_table` of the table under the same problem, bound by the table's limit,
    for these counts or more: the DPs then visit no stage after which the layers left fit in no split of the
    stages left (on no whole split: the same optimum and ties).
    """
    values = values if values is not None else first_values(table, problem)
    copies = copies or copy_buffers(table)
    if floors is not None:
        floors = {k: floors[k] for k in problem.stage_counts if k in floors}
    best = suffixes.best if suffixes is not None else None
    per_count = _exact_per_count(table, problem, None, values=values, floors=floors, copies=copies, suffix_best=best)
    outcome = lexicographic_optimum(table, problem, per_count, range_values=values, copies=copies, suffix_best=best)
    return () if outcome is None else outcome.bounds


def first_values(table: RangeCosts, problem: SplitProblem) -> RangeValues | None:
    """Objective 1's :class:`RangeValues` of every range, uncapped; None when it reads memory."""
    first = objective_order(table, problem.objectives)[0]
    return None if first.uses_memory else RangeValues(table, first, math.inf)


def _exact_per_count(table: RangeCosts, problem: SplitProblem, deadline: float | None, *,
                     values: RangeValues | None = None,
                     floors: Mapping[int, float] | None = None,
                     copies: Callable[[int, int], int] | None = None,
                     suffix_best: Sequence[Sequence[float]] | None = None) -> dict[int, tuple[Bounds, float] | None]:
    """The exact DP's optimum of objective 1 for every stage count that reaches the best one (others may be None).

    First capped at the best value with memory left out (the smallest of :func:`value_floors`), then, while
    no split reaches the cap, by :data:`CAP_STEP` more at a time (docs/solvers.md, 'Exact', says why the
    first cap reached gives the optimum). ``values``: objective 1's :class:`RangeValues`, and ``floors``
    (:func:`value_floors`, of these counts), and ``copies`` (:func:`popliner.solvers.dp.copy_buffers`), when the
    caller has them; ``suffix_best``: see :func:`popliner.solvers.dp.dp_for_stages`.
    """
    # Each count's floor: a count whose floor is above the cap has no split within it, and is not searched.
    floors = value_floors(table, problem, values=values) if floors is None else floors
    cap = min(floors.values(), default=math.inf)
    for _ in range(CAP_STEPS):
        per_count = dp_per_count(table, problem, deadline=deadline, cap=cap, values=values, floors=floors,
                                 copies=copies, suffix_best=suffix_best)
        if cap == math.inf or any(found is not None for found in per_count.values()):
            return per_count
        cap = cap * CAP_STEP if cap > 0 else math.inf
    return dp_per_count(table, problem, deadline=deadline, values=values, floors=floors, copies=copies,
                        suffix_best=suffix_best)


def _out_of_time(table: RangeCosts, problem: SplitProblem, best: tuple[Bounds, float] | None,
                 relaxed: Callable[[float], RangeCosts] | None, layer_need: Callable[[int], str] | None,
                 time_limit: float, solver: str, step: str = "the exact DP") -> SplitOutcome:
    """``step`` did not finish in time: the best split so far (the DP's, else greedy's), not proved optimal.

    With none known (greedy's table rows stopped at the deadline), the
    outcome is TIMEOUT, never INFEASIBLE: nothing was proved, the time ran
    out first (the stages are the best effort, if the time left one).
    """
    ran_out = f"the {time_limit:g} s time limit ran out before {step} finished"
    if best is None and solver == "ilp":
        try:
            greedy = greedy_bounds(table, problem)
        except OutOfTime:
            greedy = None
        if greedy is not None:
            best = greedy[0], first_objective(table, problem, greedy[0])
    if best is None:
        # Nothing found in time, so nothing is proved either: a best effort with no time left says so.
        outcome = _infeasible(table, problem, solver, relaxed, layer_need, time.monotonic(), time_limit)
        return SplitOutcome(solver, TIMEOUT, outcome.bounds, note=f"{ran_out}; {outcome.note}")
    return SplitOutcome(solver, "FEASIBLE", best[0], objective=float(best[1]),
                        note=f"{ran_out}: the best split found by then, not proved optimal")


def first_objective(table: RangeCosts, problem: SplitProblem, bounds: Bounds) -> float:
    """The first objective of a split (:func:`popliner.solvers.objective.objective_order`)."""
    k = len(bounds)
    memories = [position_memory(table, i, j, p, k, problem.training) for p, (i, j) in enumerate(bounds)]
    return split_value(objective_order(table, problem.objectives)[0], table, bounds, memories)


def _infeasible(table: RangeCosts, problem: SplitProblem, solver: str, relaxed: Callable[[float], RangeCosts] | None,
                layer_need: Callable[[int], str] | None, deadline: float | None = None,
                time_limit: float = math.inf) -> SplitOutcome:
    """Why nothing fits and a best-effort split, within the solve's deadline.

    The reason (the fewest IPUs that fit) may use at most half of the time
    left, so that the best effort always gets a share; past the deadline
    each returns what it has, and the note says so.
    """
    start = time.monotonic()
    half = None if deadline is None else start + max(deadline - start, 0.0) / 2
    ran_out = f"the {time_limit:g} s time limit ran out"
    try:
        # A lazy table at the budget when there is one: the search reads only the rows a fitting split could use.
        hint = infeasibility_reason(relaxed(1.0) if relaxed is not None else table, problem, layer_need, half)
    except OutOfTime:
        hint = f"{ran_out} before the fewest IPUs that fit were found"
    log.warning("no split of %d layers fits on %d IPUs of %d bytes per tile: %s",
                table.num_layers, problem.num_ipus, problem.budget, hint)
    with phase("best-effort split"):
        try:
            bounds = best_effort(relaxed, problem, deadline) if relaxed is not None else ()
        except OutOfTime as stop:
            bounds = stop.best[0] if stop.best is not None else ()
            hint += (f"; {ran_out}: the best-effort split is the best found by then" if bounds
                     else f"; {ran_out} before a best-effort split was found")
    return SplitOutcome(solver, "INFEASIBLE", bounds, note=hint)


def best_effort(relaxed: Callable[[float], RangeCosts], problem: SplitProblem, deadline: float | None = None) -> Bounds:
    """The split over the IPUs asked for whose fullest tile is smallest, when nothing fits; () if none is within
    :data:`BEST_EFFORT_LIMIT` times the budget.

    Ranges come from ``relaxed(BEST_EFFORT_LIMIT)`` (best as a lazy table), through the suffix DP
    (docs/solvers.md, 'Exact'). Past ``deadline`` it raises :class:`OutOfTime`.
    """
    table = relaxed(BEST_EFFORT_LIMIT)
    n = table.num_layers
    suffixes = suffix_table(table, problem, float(table.limit), problem.num_ipus, deadline)
    counts = problem.stage_counts
    values = {k: suffixes.whole(k) for k in counts if k <= n}
    best = min(values.values(), default=math.inf)
    if best == math.inf:
        return ()
    stages = min(k for k, v in values.items() if v == best)  # the fewest stages of that value, as the exact DP picks
    return forward_bounds(table, problem, suffixes, stages, best)


def infeasibility_reason(table: RangeCosts, problem: SplitProblem,
                         layer_need: Callable[[int], str] | None = None, deadline: float | None = None) -> str:
    """Why nothing fits, in terms a user can act on (:class:`OutOfTime` past ``deadline``)."""
    need = minimum_ipus(table, problem, deadline)
    if need is not None:
        return f"it needs at least {need} IPUs at this budget"
    for k, name in enumerate(table.layer_names):
        if table.memory(k, k, 0) > problem.budget:
            phrase = layer_need(k) if layer_need is not None else "does not fit"
            if k == 0 and table.head_wraps:
                return f"IPU 0 with layer {name} and the wrapped head {phrase}"
            return (f"layer {name} alone {phrase}"
                    f"{' (with the operations that have no layer)' if k == 0 and table.has_unlayered else ''}")
    depth = "2(K-i)+1 entries on IPU i, the head wrapped" if table.head_wraps else "2(K-1-i)+1 entries on IPU i"
    return ("no number of IPUs works: every layer fits alone, but the activation stashes of the first IPUs "
            f"grow with the pipeline depth ({depth}); raise --mem-per-tile, use a smaller "
            "micro-batch or recomputation, or compare with --mode inference")


def minimum_ipus(table: RangeCosts, problem: SplitProblem, deadline: float | None = None) -> int | None:
    """Fewest stages that fit (ignoring the IPU count asked for), or None (:class:`OutOfTime` past ``deadline``).

    One suffix DP at the table's limit (:mod:`popliner.solvers.suffix`) answers every stage count at once.
    """
    n = table.num_layers
    suffixes = suffix_table(table, problem, float(table.limit), n, deadline)
    return next((k for k in range(1, n + 1) if suffixes.whole(k) < math.inf), None)
