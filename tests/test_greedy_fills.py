"""PopLiner's greedy picks the plan of its rule, written out here on its own as the oracle.

The reference below is the rule as PopLiner's parity note states it: for
each minimum, each cap, and (training) each planned depth K = 1, 2, ... in
turn, fill IPUs in order and keep the first plan that places every layer.
These tests check on random tables (pins, same-IPU pairs, copy buffers, a
wrapped head, exact IPU counts, user minimums, many IPUs, wide boundaries)
that :func:`greedy_bounds` picks the same plan.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from popliner.pipeline import copy_buffer_per_tile, extra_stash_entries, range_boundaries
from popliner.solvers.greedy import CAPS, MIN_LAYERS, greedy_bounds
from popliner.solvers.problem import ArrayRanges, SplitProblem
from tests.sizes import examples, sized


def _needed(table, problem, start, min_layers):
    group = 1 if start == 0 and table.has_unlayered else 0
    left = table.num_layers - start + group
    rule = max(min_layers - group, 1) if left >= min_layers else 1
    return max(rule, min(problem.min_layers, table.num_layers))


def _stage_end(table, problem, start, cap, position, stages):
    """The last layer of the longest stage from ``start`` the greedy rule allows (None: not even one)."""
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    extra = extra_stash_entries(position, stages, table.head_wraps) if problem.training else 0
    best = None
    for j in range(start, table.num_layers):
        copies = copy_buffer_per_tile(*range_boundaries(table, start, j), table.tiles)
        total = table.memory(start, j, extra) + copies
        if total > min(cap, table.limit) or any(start <= p < j for p in problem.split_after):
            break
        if j == table.num_layers - 1 or problem.allowed_split(j, forbidden):
            best = j
        if j in problem.split_after:
            break
    return best


def _plan(table, problem, cap, min_layers, stages):
    bounds, start = [], 0
    while start < table.num_layers:
        if len(bounds) >= stages:
            return None
        end = _stage_end(table, problem, start, cap, len(bounds), stages)
        if end is None or end - start + 1 < _needed(table, problem, start, min_layers):
            return None
        bounds.append((start, end))
        start = end + 1
    if problem.exact_ipus and len(bounds) != problem.num_ipus:
        return None
    return tuple(bounds)


def reference_greedy(table, problem):
    depths = range(1, problem.num_ipus + 1) if problem.training else (problem.num_ipus,)
    for min_layers in MIN_LAYERS:
        for cap in CAPS:
            for stages in depths:
                found = _plan(table, problem, int(cap * problem.budget), min_layers, stages)
                if found is not None:
                    return found, cap, max(min_layers, problem.min_layers)
    return None


def assert_same_plan(table, problem):
    assert greedy_bounds(table, problem) == reference_greedy(table, problem)


class CountingRanges(ArrayRanges):
    """An array table that counts the distinct ranges read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: set[tuple[int, int]] = set()
        self.made = (args, kwargs)

    def __repr__(self):
        args, kwargs = self.made
        return f"CountingRanges(*{args!r}, **{kwargs!r})"

    def memory(self, i, j, extra_stash):
        self.read.add((i, j))
        return super().memory(i, j, extra_stash)


@st.composite
def problems(draw):
    n = draw(st.integers(2, 24))
    layers = st.lists(st.integers(0, 40), min_size=n, max_size=n)
    base = [b + 1 for b in draw(layers)]
    peak, stash = draw(layers), [s // 4 for s in draw(layers)]
    # Copy buffers from none to as large as a layer: tiles=1 adds each boundary's bytes whole.
    cross = draw(st.lists(st.integers(0, draw(st.sampled_from([0, 3, 40]))), min_size=n, max_size=n))
    head = draw(st.one_of(st.none(), st.tuples(st.integers(0, 30), st.integers(0, 30), st.just(0))))
    budget = draw(st.integers(30, 400))
    limit = draw(st.sampled_from([math.inf, budget, budget + 20]))
    table = CountingRanges(base, peak, [1] * n, cross, stash=stash, limit=limit, tiles=1,
                           has_unlayered=draw(st.booleans()), head=head)
    pins = tuple(sorted(draw(st.sets(st.integers(0, n - 2), max_size=2)))) if n > 1 else ()
    same = tuple(draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=1)))
    problem = SplitProblem(draw(st.integers(1, 12)), budget, exact_ipus=draw(st.booleans()),
                           min_layers=draw(st.integers(1, 3)), split_after=pins, same_ipu=same,
                           training=draw(st.booleans()))
    return table, problem


@pytest.mark.parametrize("count", examples(75, 600))
def test_greedy_picks_the_plan_of_trying_every_depth_in_turn(count):
    @sized(count)
    @given(problems())
    def run(case):
        assert_same_plan(*case)

    run()


@st.composite
def deep_problems(draw):
    """Training over many IPUs, where the greedy guesses and probes: boundaries that send nothing or a lot."""
    n = draw(st.integers(8, 40))
    base = [b + 5 for b in draw(st.lists(st.integers(0, 10), min_size=n, max_size=n))]
    peak = draw(st.lists(st.integers(0, 10), min_size=n, max_size=n))
    stash = draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))
    cross = draw(st.lists(st.sampled_from([0, 1, 20, 40]), min_size=n, max_size=n))
    table = CountingRanges(base, peak, [1] * n, cross, stash=stash, tiles=1)
    return table, SplitProblem(draw(st.integers(4, 24)), draw(st.integers(60, 300)), training=True)


# Without the allowance for copy buffers that grow with a later start, this plan of 4 IPUs would be ruled
# out wrongly.
@pytest.mark.parametrize("count", examples(100, 300))
def test_greedy_over_many_ipus_picks_the_same_plan(count):
    @example(case=(CountingRanges(
        [5, 5, 5, 5, 5, 5, 7, 5, 5, 7, 11, 15, 5, 5, 5, 6, 15, 5, 5, 5, 5, 11, 15],
        [0, 0, 0, 0, 10, 0, 0, 0, 0, 0, 0, 7, 0, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0], [1] * 23,
        [0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0],
        stash=[0, 0, 0, 0, 1, 3, 3, 0, 0, 0, 2, 3, 0, 3, 3, 3, 3, 0, 0, 0, 0, 0, 0], tiles=1),
        SplitProblem(4, 110, training=True)))
    @sized(count)
    @given(deep_problems())
    def run(case):
        assert_same_plan(*case)

    run()


@st.composite
def wide_boundaries(draw):
    """Light layers and every boundary as wide: a stage from the first layer receives nothing, the others a lot."""
    n = draw(st.integers(4, 24))
    base = [b + 1 for b in draw(st.lists(st.integers(0, 3), min_size=n, max_size=n))]
    stash = draw(st.lists(st.sampled_from([0, 1, 3, 8]), min_size=n, max_size=n))
    table = CountingRanges(base, [0] * n, [1] * n, [draw(st.sampled_from([10, 30, 60]))] * n, stash=stash, tiles=1)
    return table, SplitProblem(draw(st.integers(2, 12)), draw(st.integers(60, 300)), training=True)


# A plan's first stage receives nothing, its partner in a deeper plan does: without comparing the two
# first, the one-stage plan at the 80% cap would be ruled out.
@pytest.mark.parametrize("count", examples(100, 300))
def test_greedy_with_wide_boundaries_picks_the_same_plan(count):
    @example(case=(CountingRanges(
        [1, 3, 1, 3, 1, 2, 2, 4, 1, 3, 1, 4, 3, 2, 4, 1, 1, 3, 3, 4, 2, 1, 2, 1], [0] * 24, [1] * 24, [30] * 24,
        stash=[1, 8, 1, 0, 0, 3, 3, 3, 3, 8, 1, 0, 8, 3, 3, 8, 8, 0, 3, 3, 1, 8, 3, 1], tiles=1),
        SplitProblem(3, 113, training=True)))
    @sized(count)
    @given(wide_boundaries())
    def run(case):
        assert_same_plan(*case)

    run()
