"""The objectives: their default order, their checks, and a new one plugged in (DP, CP-SAT and greedy agree)."""

from __future__ import annotations

import itertools

import pytest

from popliner.errors import UsageProblem
from popliner.pipeline import RangeCosts, position_memory
from popliner.solvers import objective as objective_module
from popliner.solvers.objective import CROSSING, CYCLES, MEMORY, Objective, objective_order, split_value
from popliner.solvers.problem import ArrayRanges, SplitProblem
from popliner.solvers.solve import first_objective, solve_bounds
from tests.helpers import dp_bounds
from tests.ilp_oracle import ilp_bounds


def table(cycles: list[int]) -> ArrayRanges:
    # Memory grows by 10 a layer, so memory alone would spread the layers evenly.
    n = len(cycles)
    return ArrayRanges([10] * n, [0] * n, cycles, [5, 1, 7, 2, 3][: n - 1], limit=1000)


def test_the_default_order() -> None:
    assert objective_order(table([3, 1, 4, 1, 5])) == (CYCLES, MEMORY, CROSSING)
    # A profile without cycles: memory first (and second).
    assert objective_order(table([0, 0, 0, 0, 0])) == (MEMORY, MEMORY, CROSSING)
    assert objective_order(table([3, 1, 4, 1, 5]), ("memory",)) == (MEMORY, CYCLES, MEMORY)


def test_bad_orders_are_refused() -> None:
    with pytest.raises(UsageProblem, match="unknown objective.*nope"):
        objective_order(table([1, 1]), ("nope",))
    with pytest.raises(UsageProblem, match="crossing adds up over the stages"):
        objective_order(table([1, 1]), ("crossing",))


def test_split_values_by_hand() -> None:
    t = table([3, 1, 4, 1, 5])
    bounds = ((0, 1), (2, 2), (3, 4))
    memories = [20.0, 10.0, 20.0]
    # Cycles per stage: compute plus what it receives (bytes_per_cycle 1): 4, 4 + 1, 6 + 7.
    assert split_value(CYCLES, t, bounds, memories) == 13
    assert split_value(MEMORY, t, bounds, memories) == 20
    assert split_value(CROSSING, t, bounds, memories) == 1 + 7  # after layers 1 and 2


def most_layers(t: RangeCosts, i: int, j: int, memory: float) -> float:
    return float(j - i + 1)


def brute_force(t: RangeCosts, problem: SplitProblem, order: tuple[Objective, ...]) -> tuple[float, ...]:
    """The lexicographic optimum over every contiguous split, counted out."""
    n, best = t.num_layers, None
    for k in range(1, problem.num_ipus + 1):
        for cuts in itertools.combinations(range(n - 1), k - 1):
            ends = [*cuts, n - 1]
            bounds = tuple(zip([0, *(c + 1 for c in cuts)], ends, strict=True))
            memories = [position_memory(t, i, j, p, k, problem.training) for p, (i, j) in enumerate(bounds)]
            value = tuple(split_value(o, t, bounds, memories) for o in order)
            best = value if best is None or value < best else best
    assert best is not None
    return best


def test_a_new_objective_plugs_in(monkeypatch: pytest.MonkeyPatch) -> None:
    # The walk-through of docs/solvers.md: one Objective in OBJECTIVES, named by the problem.
    toy = Objective("layers", "most layers on one IPU", "max", most_layers)
    monkeypatch.setitem(objective_module.OBJECTIVES, "layers", toy)
    t = table([9, 1, 1, 1, 1, 1])
    problem = SplitProblem(3, 1000, objectives=("layers",))
    order = objective_order(t, problem.objectives)
    assert order == (toy, CYCLES, MEMORY)
    expected = brute_force(t, problem, order)
    assert expected[0] == 2  # six layers on three IPUs: two each at best
    dp = dp_bounds(t, problem)
    assert dp is not None and dp[1] == expected[0]
    ilp = ilp_bounds(t, problem, time_limit=10)
    assert ilp is not None and ilp.objectives == expected
    assert first_objective(t, problem, ilp.bounds) == expected[0]
    outcome = solve_bounds(t, problem, time_limit=10)
    assert outcome.note.startswith("objective: most layers on one IPU") and outcome.objective == 2
    # Without it, throughput comes first: layer 0's 9 cycles alone on an IPU.
    plain = ilp_bounds(t, SplitProblem(3, 1000), time_limit=10)
    assert plain is not None and plain.bounds[0] == (0, 0)
    assert plain.objectives == brute_force(t, SplitProblem(3, 1000), objective_order(t))
