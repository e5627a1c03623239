"""The fewest stages settled from a few rows (popliner.solvers.fewest) against the suffix DP (minimum_ipus)."""

from __future__ import annotations

import random

import pytest

from popliner.analysis import analyse_profile
from popliner.memory.ranges import ProfileRanges
from popliner.plan import SplitRequest, fit_facts, plan_split, split_problem
from popliner.profile import load_profile
from popliner.solvers.fewest import fewest_within
from popliner.solvers.problem import ArrayRanges, SplitProblem
from popliner.solvers.solve import minimum_ipus
from tests.helpers import FIXTURES


def _random_request(rng: random.Random) -> tuple[ArrayRanges, SplitProblem]:
    n = rng.randint(1, 10)
    ints = lambda hi: [rng.randint(0, hi) for _ in range(n)]  # noqa: E731
    head = (rng.randint(0, 20), rng.randint(0, 20), 0) if rng.random() < 0.3 else None
    pins = tuple(sorted({rng.randrange(n) for _ in range(rng.choice([0, 0, 1, 2]))}))
    same = rng.choice([(), (), ((0, n - 1),), ((n // 2, n - 1),)])
    budget = rng.randint(5, 150)
    problem = SplitProblem(rng.randint(1, 7), budget, rng.random() < 0.2, rng.choice([1, 1, 1, 2]), pins, same,
                           False, rng.random() < 0.6)
    table = ArrayRanges(ints(30), ints(30), [0] * n, ints(40), ints(8), limit=budget,
                        tiles=rng.choice([0, 0, 4]), has_unlayered=rng.random() < 0.5, head=head)
    return table, problem


def test_fewest_within_is_the_suffix_dps_answer_or_unsettled():
    rng = random.Random(24)
    reachable = settled = plain = 0
    for _ in range(3000):
        table, problem = _random_request(rng)
        expected = minimum_ipus(table, problem)
        for upto in {1, 2, table.num_layers, expected or 1, (expected or 1) + 1}:
            got = fewest_within(table, problem, upto)
            if got is not None:
                assert got == expected, (table.__dict__, problem, upto)
            if expected is None or expected > upto:
                assert got is None  # nothing within ``upto`` fits: never a count
                continue
            reachable += 1
            settled += got is not None
            if not problem.split_after and not problem.same_ipu and not table.tiles and problem.min_layers == 1:
                # No pin, no copy buffers, no minimum: the greedy witness always finds a split.
                assert got == expected
                plain += 1
    # Settling is the point: a function that never did would pass the checks above.
    assert plain > 300 and settled > 0.7 * reachable


def test_fewest_within_by_hand():
    # Training, four layers of 10 bytes, a stash entry of 1 byte each, a budget of 28. One stage:
    # 40 > 28. Two: the first keeps 2 extra entries (12 per layer), so it holds at most 2 layers
    # (24); the last holds 2 (20): fits. So 2, settled by the passes (no pins, no copy buffers).
    table = ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, stash=[1] * 4, limit=28)
    problem = SplitProblem(4, 28, training=True)
    assert fewest_within(table, problem, 4) == 2 == minimum_ipus(table, problem)
    # At 19 no stage holds two layers: with 4 stages the first keeps 6 extra entries (16 bytes), the
    # second 4 (14), the third 2 (12), the last none (10): four. Three are ruled out by the passes.
    tight = ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, stash=[1] * 4, limit=19)
    assert fewest_within(tight, SplitProblem(4, 19, training=True), 4) == 4
    assert fewest_within(tight, SplitProblem(4, 19, training=True), 3) is None  # not within 3: not settled
    # A pin after layer 0: two stages are 0 | 1..3, 30 bytes on the second (over), ruled out as the
    # fill stops at the pin; three are 0 | 1..2 | 3.
    pinned = SplitProblem(4, 28, split_after=(0,))
    assert fewest_within(ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, limit=28), pinned, 4) == 3
    assert minimum_ipus(ArrayRanges([10] * 4, [0] * 4, [0] * 4, [0] * 4, limit=28), pinned) == 3


@pytest.mark.parametrize(("name", "budget_share"), [
    ("bert-base-training.json.gz", 0.7), ("bert-base-training.json.gz", 0.9), ("bert-tiny-inference.json", 0.3),
    ("bert-tiny-inference.json", 0.5), ("gpt2-small-inference.json.gz", 0.7),
    ("efficientnet-small-inference.json.gz", 0.9),
])
def test_fit_facts_on_profiles_are_the_suffix_dps(name, budget_share):
    # The summary's figures after a real greedy solve over 8 IPUs (fewer used): the fast path over the
    # solve's engine against the suffix DP over a fresh engine of its own (nothing shared between them).
    path = FIXTURES / name
    analysis = analyse_profile(load_profile(path))
    budget = int(analysis.profile.target.bytes_per_tile * budget_share)
    plan = plan_split(analysis, SplitRequest(num_ipus=8, mem_per_tile=budget, solver="greedy", suggest=False))
    assert plan.fits and plan.facts is not None
    fresh = analyse_profile(load_profile(path))
    problem = split_problem(fresh, plan.request)
    expected = minimum_ipus(ProfileRanges(fresh.engine, problem.budget), problem)
    assert plan.facts.fewest_ipus == expected
    # Settled by the passes (no pin, no copy buffer in the way), not by the suffix DP they fall back on.
    table = ProfileRanges(analysis.engine, problem.budget, lazy=True)
    assert fewest_within(table, problem, plan.split.num_ipus_used) == expected
    assert fit_facts(fresh, problem, used=plan.split.num_ipus_used) == plan.facts
