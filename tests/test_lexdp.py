"""The exact DP over all three objectives (popliner.solvers.lexdp) against a brute force and against CP-SAT.

The brute force counts out every contiguous split allowed by the problem and
compares their objective tuples directly; CP-SAT (tests/ilp_oracle.py) is
the independent exact solver the DP stands in for.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popliner.errors import UsageProblem
from popliner.solvers.dp import dp_per_count
from popliner.solvers.lexdp import lexicographic_optimum
from popliner.solvers.objective import objective_order
from popliner.solvers.problem import ArrayRanges, Bounds, SplitProblem
from popliner.solvers.solve import solve_bounds
from tests.helpers import structural_splits
from tests.ilp_oracle import hint_objectives, ilp_bounds
from tests.sizes import examples, sized


def every_split(table: ArrayRanges, problem: SplitProblem) -> list[tuple[tuple[int, int, int], Bounds]]:
    """Every split the problem allows, with its objectives: counted out, no DP."""
    n = table.num_layers
    counts = [problem.num_ipus] if problem.exact_ipus else range(1, problem.num_ipus + 1)
    out = []
    for k in counts:
        for bounds in structural_splits(n, problem, k):
            values = hint_objectives(table, problem, bounds)  # None when a stage is over the limit
            if values is not None:
                out.append((values, bounds))
    return out


@st.composite
def problems(draw: st.DrawFn) -> tuple[ArrayRanges, SplitProblem]:
    n = draw(st.integers(1, 7))
    ints = lambda lo, hi, size: draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size))  # noqa: E731
    # Few distinct values, so that ties (the tie-break's cases) are common.
    head = (draw(st.integers(0, 10)), draw(st.integers(0, 10)), draw(st.integers(0, 5))) if draw(st.booleans()) \
        else None
    table = ArrayRanges(ints(1, 20, n), ints(0, 20, n), ints(0, 4, n) if draw(st.booleans()) else [0] * n,
                        ints(0, 3, n if head else max(n - 1, 0)), stash=ints(0, 4, n),
                        limit=draw(st.integers(30, 120)), bytes_per_cycle=draw(st.sampled_from([1.0, 2.0])),
                        tiles=draw(st.sampled_from([0, 4])), head=head)
    pins = tuple(sorted(set(draw(st.lists(st.integers(0, max(n - 2, 0)), max_size=1))))) if n > 1 else ()
    pairs = ((0, n - 1),) if n > 1 and draw(st.integers(0, 4)) == 0 else ()
    problem = SplitProblem(draw(st.integers(1, 4)), int(table.limit), exact_ipus=draw(st.booleans()),
                           min_layers=draw(st.integers(1, 2)), split_after=pins, same_ipu=pairs,
                           training=draw(st.booleans()))
    return table, problem


@pytest.mark.parametrize("count", examples(100, 300))
def test_the_dp_gives_the_brute_force_optimum_and_tie_break(count: int) -> None:
    @sized(count)
    @given(problems())
    def run(case: tuple[ArrayRanges, SplitProblem]) -> None:
        table, problem = case
        got = lexicographic_optimum(table, problem, dp_per_count(table, problem))
        splits = every_split(table, problem)
        if not splits:
            assert got is None
            return
        best = min(values for values, _ in splits)
        assert got is not None and got.bound == got.objectives[0]
        assert got.objectives == best
        assert got.bound == best[0]
        assert hint_objectives(table, problem, got.bounds) == best
        # Ties on all three: the fewest stages, then the latest ends stage by stage.
        tied = [bounds for values, bounds in splits if values == best]
        fewest = min(len(b) for b in tied)
        assert got.bounds == max((b for b in tied if len(b) == fewest), key=lambda b: [j for _, j in b])

    run()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_the_dp_and_cp_sat_prove_the_same_optimum(case: tuple[ArrayRanges, SplitProblem]) -> None:
    table, problem = case
    got = lexicographic_optimum(table, problem, dp_per_count(table, problem))
    cp_sat = ilp_bounds(table, problem, time_limit=10, prune=False)  # CP-SAT finds objective 1 on its own too
    assert (got is None) == (cp_sat is None)
    if got is not None and cp_sat is not None:
        assert cp_sat.optimal
        assert got.objectives == cp_sat.objectives


def test_by_hand_memory_then_crossing_break_the_cycle_ties() -> None:
    # One cycle per layer and one per transfer (1000 bytes a cycle): splitting after layer 1 costs 2 and 2 + 1,
    # after layer 2 costs 3 and 1 + 1: both 3 at worst. Memory (10 a layer) then decides: 20 against 30.
    table = ArrayRanges([10] * 4, [0] * 4, [1] * 4, [5, 1, 5], bytes_per_cycle=1000)
    problem = SplitProblem(2, 1000, exact_ipus=True)
    got = lexicographic_optimum(table, problem, dp_per_count(table, problem))
    assert got is not None and got.bounds == ((0, 1), (2, 3)) and got.objectives == (3, 20, 1)
    # No cycles, every range 10 bytes, every boundary 1 byte: all five 2-stage splits tie on (10, 10, 1),
    # and the latest end wins: five layers on the first IPU.
    flat = ArrayRanges([0] * 6, [10] * 6, [0] * 6, [1] * 5)
    got = lexicographic_optimum(flat, problem, dp_per_count(flat, problem))
    assert got is not None and got.objectives == (10, 10, 1) and got.bounds == ((0, 4), (5, 5))


def test_an_order_with_a_max_after_a_sum_is_refused() -> None:
    # memory, crossing, then cycles: a worst-stage objective after one that adds up, which the
    # elimination cannot take; no option asks for it, and the library says why instead of solving it.
    table = ArrayRanges([10] * 3, [0] * 3, [1] * 3, [1, 2])
    with pytest.raises(UsageProblem, match="memory, crossing, cycles: an objective that adds up"):
        objective_order(table, ("memory", "crossing"))
    with pytest.raises(UsageProblem, match="adds up"):
        solve_bounds(table, SplitProblem(2, 1000, objectives=("memory", "crossing")), time_limit=10)


def test_a_proved_solve_says_so_and_never_imports_or_tools() -> None:
    code = (
        "import sys\n"
        "from popliner.solvers.problem import ArrayRanges, SplitProblem\n"
        "from popliner.solvers.solve import solve_bounds\n"
        "t = ArrayRanges([10] * 6, [5] * 6, [3, 1, 4, 1, 5, 9], [2, 7, 1, 8, 2], stash=[1] * 6, limit=200)\n"
        "o = solve_bounds(t, SplitProblem(3, 200, training=True), solver='ilp')\n"
        "print(o.status, o.bound == o.objective, o.gap, o.note)\n"
        "print('ortools' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.splitlines()
    assert out[0].startswith("OPTIMAL True 0.0 objective: largest stage cycles")
    assert out[0].endswith("proved optimal by the exact DP, each objective in turn (CP-SAT not needed)")
    assert out[1] == "False"


@pytest.mark.parametrize("count", examples(100, 300))
def test_the_capped_dp_finds_every_count_that_reaches_the_optimum(count: int) -> None:
    """Capped at the best value with memory left out, the DP loses no count that reaches the optimum."""
    @sized(count)
    @given(problems())
    def run(case: tuple[ArrayRanges, SplitProblem]) -> None:
        from popliner.solvers.solve import _exact_per_count
        from tests.helpers import value_floor

        table, problem = case
        plain = dp_per_count(table, problem)
        capped = _exact_per_count(table, problem, None)
        reached = [f[1] for f in plain.values() if f is not None]
        if not reached:
            assert all(f is None for f in capped.values())
            return
        best = min(reached)
        floor = value_floor(table, problem)
        if objective_order(table)[0].uses_memory:
            assert floor == float("inf")  # memory first (no cycles): no cap
        else:
            assert floor <= best  # a floor: no split that fits does better
            # Exactly the plain DP's best over every count with memory left out (nothing uses any, no limit).
            n, head = table.num_layers, table._head
            free = ArrayRanges([0] * n, [0] * n, table._cycles, table._cross, limit=float("inf"),
                               bytes_per_cycle=table._bpc, head=(0, 0, head[2]) if head is not None else None)
            assert floor == min((f[1] for f in dp_per_count(free, problem).values() if f is not None),
                                default=float("inf"))
        assert {k: f for k, f in plain.items() if f is not None and f[1] == best} == \
            {k: f for k, f in capped.items() if f is not None and f[1] == best}
        # The rest is above the optimum either way: left out within the cap, or the plain DP's (no split within it).
        assert all(f is None or (f == plain[k] and f[1] > best) for k, f in capped.items() if f is None or f[1] != best)
        # And the whole ILP solve gives the brute force's optimum.
        outcome = solve_bounds(table, problem, time_limit=10)
        assert outcome.status == "OPTIMAL" and hint_objectives(table, problem, outcome.bounds) == \
            min(values for values, _ in every_split(table, problem))

    run()


def test_the_cap_grows_until_a_split_reaches_it() -> None:
    """Stashes keep 4 stages off (IPU 0 would need 10 + 6 x 10 = 70 > 60): one layer per IPU (10 cycles) is out
    of reach, and the cap grows 10 -> 12.5 -> 15.6 -> 19.5 -> 24.4, where 2 and 3 stages reach 20 (1 stage: 40)."""
    from popliner.solvers.solve import _exact_per_count
    from tests.helpers import value_floor

    table = ArrayRanges([10] * 4, [0] * 4, [10] * 4, [0] * 3, stash=[10] * 4, limit=60)
    problem = SplitProblem(4, 60, training=True)
    assert value_floor(table, problem) == 10
    got = _exact_per_count(table, problem, None)
    plain = dp_per_count(table, problem)
    assert plain[4] is None and plain[1] is not None and plain[1][1] == 40  # one IPU: 40 cycles, above the cap
    assert got[1] is None and {k: f for k, f in got.items() if f is not None} == {2: plain[2], 3: plain[3]}
    assert plain[2] is not None and plain[2][1] == 20 and plain[3] is not None and plain[3][1] == 20


def test_when_the_lexicographic_dp_runs_out_of_time_the_first_objectives_optimum_stands(monkeypatch) -> None:
    from popliner.deadline import OutOfTime
    from popliner.solvers import solve as solve_module

    def out_of_time(*args: object, **kwargs: object) -> None:
        raise OutOfTime(None)

    monkeypatch.setattr(solve_module, "lexicographic_optimum", out_of_time)
    table = ArrayRanges([10] * 4, [0] * 4, [1] * 4, [5, 1, 5], bytes_per_cycle=1000)
    problem = SplitProblem(2, 1000, exact_ipus=True)
    outcome = solve_bounds(table, problem, time_limit=10)
    # Objective 1 (3 cycles) was proved by then; the later ones were not: FEASIBLE, and the note says why.
    assert outcome.status == "FEASIBLE" and outcome.objective == 3
    assert hint_objectives(table, problem, outcome.bounds) is not None
    assert "time limit ran out before the exact DP finished" in outcome.note
