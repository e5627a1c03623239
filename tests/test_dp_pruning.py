"""The exact DPs' prunings against plain enumerations that prune nothing.

Each DP stops a column once no range left in it can beat the best found
(popliner.solvers.dp.RangeValues.lowest), skips a stage count whose floor
with memory left out is above its cap or the best so far (value_floors), and
builds the lexicographic DP's edges only from starts reached from layer 0.
Here every split of a small table is counted out instead, with its
position's stash entries and copy buffers, and the DP's answer (optimum and
tie-break) is derived from that list alone. The tables have few distinct
values (ties are common), transfer costs that rise and fall along the layers
(a range's value is then not monotone in its first layer), pins, forbidden
splits, same-IPU pairs, minimum layers and a wrapped head.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from popliner.pipeline import position_memory
from popliner.solvers.dp import RangeValues, dp_for_stages, dp_per_count, value_floors
from popliner.solvers.edges import position_edges
from popliner.solvers.lexdp import lexicographic_optimum
from popliner.solvers.objective import CYCLES, MEMORY, Objective, objective_order
from popliner.solvers.problem import ArrayRanges, Bounds, SplitProblem
from popliner.solvers.solve import _exact_per_count
from popliner.solvers.suffix import suffix_table
from tests.helpers import structural_splits, value_floor
from tests.sizes import examples, sized

INF = math.inf


class Forbidding(ArrayRanges):
    """ArrayRanges with layers after which no stage may end when shared variables are kept together."""

    def __init__(self, *args: object, forbidden: frozenset[int] = frozenset(), **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._forbidden = forbidden

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        return self._forbidden if keep_shared_together else frozenset()


@st.composite
def cases(draw: st.DrawFn) -> tuple[Forbidding, SplitProblem]:
    n = draw(st.integers(1, 8))

    def ints(lo: int, hi: int, size: int) -> list[int]:
        return draw(st.lists(st.integers(lo, hi), min_size=size, max_size=size))

    head = (draw(st.integers(0, 8)), draw(st.integers(0, 8)), draw(st.integers(0, 4))) if draw(st.booleans()) else None
    # Crossing bytes from 0 to 12 at one byte a cycle against 0-3 cycles a layer: the transfer a range receives
    # often outweighs its compute, and rises and falls from one first layer to the next.
    table = Forbidding(ints(1, 12, n), ints(0, 12, n), ints(0, 3, n) if draw(st.booleans()) else [0] * n,
                       ints(0, 12, n if head else max(n - 1, 0)), stash=ints(0, 3, n),
                       limit=draw(st.sampled_from([INF, 40, 60, 90])),
                       bytes_per_cycle=draw(st.sampled_from([1.0, 3.0])),
                       tiles=draw(st.sampled_from([0, 4])), head=head,
                       forbidden=frozenset(draw(st.lists(st.integers(0, max(n - 2, 0)), max_size=2))) if n > 1
                       else frozenset())
    pins = tuple(sorted(set(draw(st.lists(st.integers(0, max(n - 2, 0)), max_size=2))))) if n > 1 else ()
    pairs = ((draw(st.integers(0, n - 1)), draw(st.integers(0, n - 1))),) if draw(st.integers(0, 3)) == 0 else ()
    problem = SplitProblem(draw(st.integers(1, 6)), 1000, exact_ipus=draw(st.integers(0, 3)) == 0,
                           min_layers=draw(st.integers(1, 3)), split_after=pins, same_ipu=pairs,
                           keep_shared_together=draw(st.booleans()), training=draw(st.booleans()))
    return table, problem


def splits(table: Forbidding, problem: SplitProblem, stages: int) -> list[Bounds]:
    """Every split into ``stages`` stages the problem's structure allows (memory not looked at)."""
    return structural_splits(table.num_layers, problem, stages, table.forbidden_splits(problem.keep_shared_together))


def value(table: Forbidding, problem: SplitProblem, bounds: Bounds, objective: Objective,
          memory: bool = True) -> float:
    """The split's objective (``inf`` when a stage does not fit); ``memory=False``: fits or not, as if no memory."""
    k = len(bounds)
    figures = []
    for p, (i, j) in enumerate(bounds):
        mem = position_memory(table, i, j, p, k, problem.training) if memory else 0.0
        if mem == INF:
            return INF
        figures.append(objective.stage_value(table, i, j, mem))
    return max(figures)


def counts(table: Forbidding, problem: SplitProblem) -> list[int]:
    return [problem.num_ipus] if problem.exact_ipus else list(range(1, problem.num_ipus + 1))


def dp_choice(table: Forbidding, problem: SplitProblem, stages: int, objective: Objective,
              cap: float) -> tuple[Bounds, float] | None:
    """The forward DP's split, from lists of splits alone: the optimum within ``cap``; on ties, the last stage
    starts as late as it can, and the layers before it are split the same way for their own optimum."""
    n = table.num_layers
    forbidden = table.forbidden_splits(problem.keep_shared_together)

    def best(last: int, positions: int) -> tuple[Bounds, float] | None:
        # Splits of layers 0..last into ``positions`` stages, at positions 0.. of a ``stages``-stage pipeline.
        options = []
        for cuts in itertools.combinations(range(last), positions - 1):
            bounds = tuple(zip([0, *(c + 1 for c in cuts)], [*cuts, last], strict=True))
            if any(j - i + 1 < problem.min_layers or any(i <= q < j for q in problem.split_after)
                   for i, j in bounds):
                continue
            if not all(problem.allowed_split(j, forbidden) for _, j in bounds if j < n - 1):
                continue
            memories = [position_memory(table, i, j, p, stages, problem.training) for p, (i, j) in enumerate(bounds)]
            if INF in memories:
                continue
            v = max(objective.stage_value(table, i, j, m) for (i, j), m in zip(bounds, memories, strict=True))
            if v <= cap:
                options.append((bounds, v))
        if not options:
            return None
        low = min(v for _, v in options)
        start = max(b[-1][0] for b, v in options if v == low)
        if positions == 1:
            return ((0, last),), low
        head = best(start - 1, positions - 1)
        assert head is not None  # an option starts its last stage there
        return (*head[0], (start, last)), low

    return best(n - 1, stages) if stages <= n else None


@pytest.mark.parametrize("count", examples(100, 300))
def test_value_floors_are_each_counts_best_with_memory_left_out(count: int) -> None:
    @sized(count)
    @given(cases())
    def run(case: tuple[Forbidding, SplitProblem]) -> None:
        table, problem = case
        objective = objective_order(table)[0]
        floors = value_floors(table, problem)
        if objective.uses_memory:
            assert floors == {} and value_floor(table, problem) == INF
            return
        for k in counts(table, problem):
            expected = min((value(table, problem, b, objective, memory=False) for b in splits(table, problem, k)),
                           default=INF)
            assert floors[k] == expected
        assert value_floor(table, problem) == min(floors.values())

    run()


@pytest.mark.parametrize("count", examples(60, 200))
def test_exact_over_each_count_with_the_floors_of_every_count(count: int) -> None:
    """A pod plan solves exactly over each depth K with one pass of floors for every count (popliner.pod.search):
    the same split as the exact solver over exactly K working out its own."""
    import dataclasses

    from popliner.solvers.solve import exact_optimum, first_values

    @sized(count)
    @given(cases())
    def run(case: tuple[Forbidding, SplitProblem]) -> None:
        table, problem = case
        problem = dataclasses.replace(problem, exact_ipus=False)
        values = first_values(table, problem)
        floors = value_floors(table, problem, values=values)
        for k in range(1, problem.num_ipus + 1):
            exact = dataclasses.replace(problem, num_ipus=k, exact_ipus=True)
            assert exact_optimum(table, exact, values, floors) == exact_optimum(table, exact)

    run()


@pytest.mark.parametrize("count", examples(100, 300))
def test_each_count_gives_the_split_counted_out(count: int) -> None:
    @sized(count)
    @given(cases(), st.sampled_from(["none", "floor", "above"]), st.booleans())
    def run(case: tuple[Forbidding, SplitProblem], cap_kind: str, by_memory: bool) -> None:
        table, problem = case
        objective = MEMORY if by_memory else objective_order(table)[0]
        floor = value_floor(table, problem, objective)
        cap = {"none": INF, "floor": floor, "above": floor * 1.25 + 1}[cap_kind] if floor < INF else INF
        for k in counts(table, problem):
            assert dp_for_stages(table, problem, k, objective, cap=cap) == dp_choice(table, problem, k, objective, cap)

    run()


@pytest.mark.parametrize("count", examples(100, 300))
def test_skipped_counts_could_neither_reach_nor_tie_the_optimum(count: int) -> None:
    @sized(count)
    @given(cases())
    def run(case: tuple[Forbidding, SplitProblem]) -> None:
        table, problem = case
        objective = objective_order(table)[0]
        full = {k: dp_choice(table, problem, k, objective, INF) for k in counts(table, problem)}
        optimum = min((f[1] for f in full.values() if f is not None), default=INF)
        floors = value_floors(table, problem)
        for cap in (INF, value_floor(table, problem)):
            got = dp_per_count(table, problem, cap=cap, values=None, floors=floors)
            for k, found in got.items():
                if found is not None:
                    assert found == full[k]
                elif full[k] is not None and full[k][1] <= cap:  # type: ignore[index]
                    assert full[k][1] > optimum  # type: ignore[index]
            if optimum <= cap:
                assert {k: f for k, f in got.items() if f is not None and f[1] == optimum} == \
                    {k: f for k, f in full.items() if f is not None and f[1] == optimum}
        # And the solve's own use of them: every count that reaches the optimum, with the split counted out.
        exact = _exact_per_count(table, problem, None)
        assert {k: f for k, f in exact.items() if f is not None and f[1] == optimum} == \
            {k: f for k, f in full.items() if f is not None and f[1] == optimum}

    run()


def plain_edges(table: Forbidding, problem: SplitProblem, stages: int,
                cap: float) -> list[tuple[int, int, int, tuple[int, ...]]]:
    """Every (position, first, last, values) a stage of some allowed split may be: position_memory, no shortcut."""
    n = table.num_layers
    order = objective_order(table)
    least = max(problem.min_layers, 1)
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    out = []
    for p in range(stages):
        for i in range(n):
            for j in range(i, n):
                if (i == 0) != (p == 0) or (j == n - 1) != (p == stages - 1) or j - i + 1 < problem.min_layers:
                    continue
                if i < p * least or j > n - 1 - (stages - 1 - p) * least:
                    continue
                if j < n - 1 and not problem.allowed_split(j, forbidden):
                    continue
                if any(i <= q < j for q in problem.split_after):
                    continue
                mem = position_memory(table, i, j, p, stages, problem.training)
                if mem == INF:
                    continue
                values = tuple(int(o.stage_value(table, i, j, mem)) for o in order)
                if values[0] <= cap:
                    out.append((p, i, j, values))
    return out


def _ordered(case: tuple[Forbidding, SplitProblem], cap: float
             ) -> tuple[Forbidding, SplitProblem, tuple[Objective, Objective, Objective], RangeValues | None]:
    """A drawn case with its objective order and objective 1's values under ``cap`` (None when it is memory)."""
    table, problem = case
    order = objective_order(table)
    return table, problem, order, RangeValues(table, order[0], cap) if not order[0].uses_memory else None


@pytest.mark.parametrize("count", examples(100, 300))
def test_the_edges_are_every_fitting_range_and_from_start_those_reached(count: int) -> None:
    @sized(count)
    @given(cases(), st.sampled_from([INF, 0.0, 4.0, 9.0]))
    def run(case: tuple[Forbidding, SplitProblem], cap: float) -> None:
        table, problem, order, first = _ordered(case, cap)
        for k in range(1, min(problem.num_ipus, table.num_layers) + 1):
            plain = plain_edges(table, problem, k, cap)
            got = position_edges(table, problem, k, order, cap, None, first)
            assert [(p, *e) for p, row in enumerate(got) for e in row] == plain
            assert position_edges(table, problem, k, order, cap, None) == got  # objective 1 read per range instead
            reached, kept = {0}, []
            for p in range(k):
                row = [e for e in plain if e[0] == p and e[1] in reached]
                kept += row
                reached = {e[2] + 1 for e in row}
            got = position_edges(table, problem, k, order, cap, None, first, from_start=True)
            assert [(p, *e) for p, row in enumerate(got) for e in row] == kept

    run()


@pytest.mark.parametrize("count", examples(100, 300))
def test_with_the_suffix_dp_the_edges_are_those_reached_from_which_the_end_is_reached(count: int) -> None:
    """The suffix DP (memory only, bound by the table's limit) leaves out every edge after which the layers left
    fit in no split of the positions left: the edges reached from layer 0 from which a path of fitting edges,
    whatever their objective 1, reaches the end."""
    @sized(count)
    @given(cases(), st.sampled_from([INF, 0.0, 4.0, 9.0]))
    def run(case: tuple[Forbidding, SplitProblem], cap: float) -> None:
        table, problem, order, first = _ordered(case, cap)
        most = min(problem.num_ipus, table.num_layers)
        suffixes = suffix_table(table, problem, float(table.limit), most)
        for k in range(1, most + 1):
            fitting = plain_edges(table, problem, k, INF)
            ends = {(k, table.num_layers)}  # (position, first layer) from which the end is reached
            for p in range(k - 1, -1, -1):
                ends |= {(p, e[1]) for e in fitting if e[0] == p and (p + 1, e[2] + 1) in ends}
            reached = position_edges(table, problem, k, order, cap, None, first, from_start=True)
            expected = [(p, *e) for p, row in enumerate(reached) for e in row if (p + 1, e[1] + 1) in ends]
            got = position_edges(table, problem, k, order, cap, None, first, from_start=True,
                                 suffix_best=suffixes.best)
            assert [(p, *e) for p, row in enumerate(got) for e in row] == expected

    run()


@pytest.mark.parametrize("count", examples(60, 200))
def test_with_the_suffix_dp_the_exact_solver_gives_the_same_split(count: int) -> None:
    """A pod plan hands its suffix search to the exact solver over each depth K (popliner.pod.search): the DP's
    split of every count and the lexicographic optimum are those it finds without."""
    import dataclasses

    from popliner.solvers.solve import exact_optimum

    @sized(count)
    @given(cases())
    def run(case: tuple[Forbidding, SplitProblem]) -> None:
        table, problem = case
        objective = objective_order(table)[0]
        most = min(problem.num_ipus, table.num_layers)
        suffixes = suffix_table(table, problem, float(table.limit), most)
        for k in range(1, most + 1):
            assert dp_for_stages(table, problem, k, objective, suffix_best=suffixes.best) == \
                dp_for_stages(table, problem, k, objective)
            exact = dataclasses.replace(problem, num_ipus=k, exact_ipus=True)
            assert exact_optimum(table, exact, suffixes=suffixes) == exact_optimum(table, exact)

    run()


@pytest.mark.parametrize("count", examples(100, 200))
def test_the_lexicographic_optimum_is_the_best_split_counted_out(count: int) -> None:
    """The whole pruned chain against the list of every split: objectives, then fewest stages, then latest ends."""
    @sized(count)
    @given(cases())
    def run(case: tuple[Forbidding, SplitProblem]) -> None:
        from tests.ilp_oracle import hint_objectives

        table, problem = case
        got = lexicographic_optimum(table, problem, _exact_per_count(table, problem, None))
        scored = [(v, b) for k in counts(table, problem) for b in splits(table, problem, k)
                  if (v := hint_objectives(table, problem, b)) is not None]
        if not scored:
            assert got is None
            return
        best = min(v for v, _ in scored)
        tied = [b for v, b in scored if v == best]
        fewest = min(len(b) for b in tied)
        assert got is not None and got.objectives == best
        assert got.bounds == max((b for b in tied if len(b) == fewest), key=lambda b: [j for _, j in b])

    run()


def test_a_column_stops_only_once_no_earlier_first_layer_can_do_better() -> None:
    """By hand, one cycle a layer and one byte a cycle; layers 2 and 3 receive 9 bytes, layer 1 none.
    Two stages: after layer 0, max(1, 3 + 0) = 3; after 1, max(2, 2 + 9) = 11; after 2, max(3, 1 + 9) = 10.
    The best last stage starts at layer 1, past a start that is worse than the one before it (2 after 3):
    a column that stopped at the first value no better than the best so far would miss it."""
    table = ArrayRanges([1] * 4, [0] * 4, [1] * 4, [0, 9, 9])
    problem = SplitProblem(2, 1000, exact_ipus=True)
    assert dp_for_stages(table, problem, 2, CYCLES) == (((0, 0), (1, 3)), 3.0)
    pinned = SplitProblem(2, 1000, exact_ipus=True, split_after=(1,))
    assert dp_for_stages(table, pinned, 2, CYCLES) == (((0, 1), (2, 3)), 11.0)
    # Three stages: after 0 and 1, 11; after 0 and 2, 10; after 1 and 2, max(2, 1 + 9, 1 + 9) = 10.
    assert value_floors(table, SplitProblem(3, 1000)) == {1: 4.0, 2: 3.0, 3: 10.0}
    assert dp_per_count(table, SplitProblem(3, 1000), floors=value_floors(table, SplitProblem(3, 1000))) == \
        {1: (((0, 3),), 4.0), 2: (((0, 0), (1, 3)), 3.0), 3: None}  # 3 stages: floor 10 > 3, not searched


def plain_greedy(table: Forbidding, problem: SplitProblem) -> tuple[Bounds, float, int] | None:
    """PopLiner's greedy rule spelled out with position_memory for every range (no figure taken once)."""
    from popliner.solvers.greedy import CAPS, MIN_LAYERS, layers_needed

    n = table.num_layers
    forbidden = table.forbidden_splits(problem.keep_shared_together)

    def fill(cap: int, least: int, planned: int) -> Bounds | None:
        bounds: list[tuple[int, int]] = []
        while not bounds or bounds[-1][1] < n - 1:
            start = bounds[-1][1] + 1 if bounds else 0
            if len(bounds) >= planned:
                return None
            end = None
            for j in range(start, n):
                if position_memory(table, start, j, len(bounds), planned, problem.training) > cap:
                    break
                if j == n - 1 or problem.allowed_split(j, forbidden):
                    end = j
                if j in problem.split_after:
                    break
            if end is None or end - start + 1 < layers_needed(table, problem, start, least):
                return None
            bounds.append((start, end))
        return tuple(bounds) if not problem.exact_ipus or len(bounds) == problem.num_ipus else None

    for least in MIN_LAYERS:
        for cap in CAPS:
            plans = range(1, problem.num_ipus + 1) if problem.training else [problem.num_ipus]
            for planned in plans:
                found = fill(int(cap * problem.budget), least, planned)
                if found is not None:
                    return found, cap, max(least, problem.min_layers)
    return None


@pytest.mark.parametrize("count", examples(100, 300))
def test_greedy_is_its_rule_spelled_out(count: int) -> None:
    @sized(count)
    @given(cases(), st.sampled_from([30, 45, 60, 1000]))
    def run(case: tuple[Forbidding, SplitProblem], budget: int) -> None:
        from dataclasses import replace

        from popliner.solvers.greedy import greedy_bounds

        table, problem = case
        problem = replace(problem, budget=budget)
        assert greedy_bounds(table, problem) == plain_greedy(table, problem)

    run()
