"""The fewest IPUs that fit (minimum_ipus, the suffix DP), by hand and after a real solve."""

from __future__ import annotations

import pytest

from popliner.analysis import analyse_profile, scenario
from popliner.plan import SplitRequest, fit_facts, plan_split, split_problem
from popliner.profile import load_profile
from popliner.solvers.problem import ArrayRanges, SplitProblem
from popliner.solvers.solve import minimum_ipus
from tests.helpers import FIXTURES


def test_fewest_ipus_by_hand():
    # Training, four layers of 10 bytes, a stash entry of 1 byte each, a budget of 28. One stage:
    # 40 > 28. Two: the first keeps 2 extra entries (12 per layer), so it holds at most 2 layers
    # (24); the last holds 2 (20): fits. So 2.
    table = ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, stash=[1] * 4, limit=28)
    assert minimum_ipus(table, SplitProblem(4, 28, training=True)) == 2
    # At 19 no stage holds two layers: with 4 stages the first keeps 6 extra entries (16 bytes), the
    # second 4 (14), the third 2 (12), the last none (10): four.
    tight = ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, stash=[1] * 4, limit=19)
    assert minimum_ipus(tight, SplitProblem(4, 19, training=True)) == 4
    # A pin after layer 0: two stages are 0 | 1..3, 30 bytes on the second (over); three are 0 | 1..2 | 3.
    pinned = SplitProblem(4, 28, split_after=(0,))
    assert minimum_ipus(ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, limit=28), pinned) == 3


@pytest.mark.parametrize(("name", "budget_share"), [
    ("bert-base-training.json.gz", 0.7), ("bert-base-training.json.gz", 0.9), ("bert-tiny-inference.json", 0.3),
    ("bert-tiny-inference.json", 0.5), ("gpt2-small-inference.json.gz", 0.7),
    ("efficientnet-small-inference.json.gz", 0.9),
])
def test_fit_facts_on_profiles_are_the_suffix_dps(name, budget_share):
    # The summary's figures after a real greedy solve over 8 IPUs (fewer used), over the solve's engine,
    # against the suffix DP over a fresh engine of its own (nothing shared between them).
    path = FIXTURES / name
    analysis = analyse_profile(load_profile(path))
    budget = int(analysis.profile.target.bytes_per_tile * budget_share)
    plan = plan_split(analysis, SplitRequest(num_ipus=8, mem_per_tile=budget, solver="greedy", suggest=False))
    assert plan.fits and plan.facts is not None
    # The same scenario (the plan's resolved options: a tied head is wrapped by PopART's default), fresh.
    fresh = scenario(analyse_profile(load_profile(path)).base, plan.analysis.options.training)
    problem = split_problem(fresh, plan.request)
    expected = minimum_ipus(fresh.range_table(problem.budget), problem)
    assert plan.facts.fewest_ipus == expected
    assert fit_facts(fresh, problem) == plan.facts
