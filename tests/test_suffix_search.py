"""The suffix DP behind the best effort and the fewest-IPUs search, against the forward DP it replaces."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popliner.analysis import analyse_profile
from popliner.pipeline import position_memory
from popliner.profile import load_profile
from popliner.solvers.objective import MEMORY
from popliner.solvers.problem import ArrayRanges, SplitProblem
from popliner.solvers.solve import best_effort, minimum_ipus
from popliner.solvers.suffix import suffix_table
from tests.helpers import FIXTURES, dp_bounds
from tests.sizes import examples, sized


def _relaxed_dp(relaxed, problem):
    """The best effort as it was: the forward DP on memory over tables at 1.5x, 3x and 8x the budget."""
    for factor in (1.5, 3.0, 8.0):
        found = dp_bounds(relaxed(factor), problem, objective=MEMORY)
        if found is not None:
            return found[0]
    return ()


def _fewest_by_dp(table, problem):
    """The fewest IPUs as it was: the forward DP for exactly k stages, k = 1, 2, ..."""
    for k in range(1, table.num_layers + 1):
        trial = SplitProblem(k, problem.budget, True, problem.min_layers, problem.split_after, problem.same_ipu,
                             problem.keep_shared_together, problem.training)
        if dp_bounds(table, trial) is not None:
            return k
    return None


@st.composite
def requests(draw):
    n = draw(st.integers(1, 9))
    ints = lambda hi, size=n: st.lists(st.integers(0, hi), min_size=size, max_size=size)  # noqa: E731
    base, peak, stash, cross = draw(ints(30)), draw(ints(30)), draw(ints(8)), draw(ints(40))
    head = draw(st.none() | st.tuples(st.integers(0, 20), st.integers(0, 20), st.just(0)))
    tiles = draw(st.sampled_from([0, 4]))
    unlayered = draw(st.booleans())
    budget = draw(st.integers(5, 150))
    pins = tuple(sorted(set(draw(st.lists(st.integers(0, n - 1), max_size=2)))))
    same = draw(st.sampled_from([(), ((0, n - 1),), ((n // 2, n - 1),)]))
    problem = SplitProblem(draw(st.integers(1, 7)), budget, draw(st.booleans()), draw(st.sampled_from([1, 1, 2])),
                           pins, same, False, draw(st.booleans()))

    def make(limit):
        return ArrayRanges(base, peak, [0] * n, cross, stash, limit=limit, tiles=tiles, has_unlayered=unlayered,
                           head=head)

    return make, problem


@pytest.mark.parametrize("count", examples(100, 300))
def test_best_effort_is_the_split_the_relaxed_forward_dp_gave(count):
    # Same split, tie-breaking included: the fewest stages of the smallest largest memory, and the
    # latest start of each stage among those of smallest value (dp_for_stages' choice).
    @sized(count)
    @given(requests())
    def run(request):
        make, problem = request
        relaxed = lambda factor: make(int(problem.budget * factor))  # noqa: E731
        assert best_effort(relaxed, problem) == _relaxed_dp(relaxed, problem)

    run()


@pytest.mark.slow  # a long case (about 3 s)
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_fewest_ipus_is_the_first_stage_count_the_forward_dp_fits(request):
    make, problem = request
    assert minimum_ipus(make(problem.budget), problem) == _fewest_by_dp(make(problem.budget), problem)


def test_suffix_table_by_hand():
    # Three layers of 10 bytes, one stash entry of 1 byte each, training. A stage with r stages from
    # it to the end keeps 2(r-1) extra entries: layers i..j then weigh 10(j-i+1) + 2(r-1)(j-i+1).
    table = ArrayRanges([10, 10, 10], [0, 0, 0], [0, 0, 0], [0, 0, 0], stash=[1, 1, 1])
    problem = SplitProblem(3, 100, training=True)
    out = suffix_table(table, problem, 100, 3)
    # One stage: 30 (all three, nothing extra). Two: the last holds 1 or 2 layers (10 or 20, no
    # stash), the first 2 or 1 with 2 extra entries (24 or 12): min(max(24, 10), max(12, 20)) = 20.
    # Three: 10 + 4 = 14, 10 + 2 = 12, 10: 14.
    assert [out.whole(k) for k in (1, 2, 3)] == [30, 20, 14]
    assert out.best[1][1] == 20 and out.best[2][1] == 12  # layers 1..2: one stage of 20, or 12 and 10
    # Under a bound of 19 only the three-stage split is left.
    tight = suffix_table(table, problem, 19, 3)
    assert [tight.whole(k) for k in (1, 2, 3)] == [math.inf, math.inf, 14]


def test_a_lazy_table_gives_the_same_figures_and_builds_rows_only_as_far_as_read():
    analysis = analyse_profile(load_profile(FIXTURES / "bert-tiny-training.json"))
    eager = analysis.range_table(10**9)
    n = eager.num_layers
    expected = {(i, j, e): eager.memory(i, j, e) for i in range(n) for j in range(i, n) for e in (0, 2)}
    fresh = analyse_profile(load_profile(FIXTURES / "bert-tiny-training.json"))
    lazy = fresh.range_table(10**9, lazy=True)
    figures = lazy._shared.figures
    lazy.memory(0, 0, 0)
    assert set(figures) == {(0, 0)}  # an eager table would have built the whole row
    keys = list(expected)
    random.Random(3).shuffle(keys)  # rows read out of order: each continued or rebuilt, same bytes
    assert {key: lazy.memory(*key) for key in keys} == expected
    # Positions and copy buffers on top of the figures are the table's too.
    assert position_memory(lazy, 0, n - 1, 0, 1, True) == position_memory(eager, 0, n - 1, 0, 1, True)


def test_on_a_profile_lazy_tables_give_the_relaxed_forward_dps_split_and_fewest_ipus():
    # BERT-Base training (12 layers): requests that do not fit, with a best effort at 4.7x, 1.4x and
    # 1.03x the budget (the 8x, 1.5x and 1.5x tables as it was) and fewest IPUs of none, 4 and 3.
    # The old way reads eager tables of one engine, the new way lazy tables of another (nothing
    # shared between them).
    path = FIXTURES / "bert-base-training.json.gz"
    old_engine = analyse_profile(load_profile(path))
    new_engine = analyse_profile(load_profile(path))
    for budget, ipus in ((150_000, 2), (500_000, 2), (400_000, 8), (600_000, 2)):
        problem = SplitProblem(ipus, budget, training=True)
        old = _relaxed_dp(lambda f: old_engine.range_table(int(budget * f)), problem)  # noqa: B023
        new = best_effort(lambda f: new_engine.range_table(int(budget * f), lazy=True), problem)  # noqa: B023
        assert new == old and new
        assert minimum_ipus(new_engine.range_table(budget, lazy=True), problem) == _fewest_by_dp(
            old_engine.range_table(budget), problem)
