"""Greedy, DP and CP-SAT solvers over range tables."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from popliner.analysis import analyse_profile, solve_split
from popliner.deadline import OutOfTime
from popliner.memory.running import PIECES
from popliner.pipeline import range_cost, stash_depth
from popliner.profile import load_profile
from popliner.solvers.dp import dp_for_stages, dp_per_count
from popliner.solvers.greedy import greedy_bounds, layers_needed
from popliner.solvers.objective import MEMORY
from popliner.solvers.problem import ArrayRanges, SplitProblem
from popliner.solvers.solve import solve_bounds
from tests.helpers import FIXTURES, dp_bounds, stage_stash_entry
from tests.ilp_oracle import ilp_bounds

TINY = FIXTURES / "tiny.json"


def flat(n, mem=10, cycles=1, cross=0):
    return ArrayRanges([mem] * n, [0] * n, [cycles] * n, [cross] * n)


def test_stash_depth_matches_popart():
    # K = 4 IPUs: 7, 5, 3 entries, none on the last.
    assert [stash_depth(k, 4) for k in range(4)] == [7, 5, 3, 0]
    assert stash_depth(0, 1) == 0


def test_greedy_fills_at_the_lowest_cap_that_works():
    # 6 layers of 10 bytes, budget 100, cap 50% = 50 bytes: IPU 0 takes layers
    # 0..4 (50; 0..5 would be 60). One layer is left, fewer than the minimum
    # of 3, so the last stage may hold just that one: 5 + 1 at the first cap.
    table = flat(6)
    bounds, cap, need = greedy_bounds(table, SplitProblem(2, 100))
    assert (bounds, cap, need) == (((0, 4), (5, 5)), 0.5, 3)


def test_greedy_counts_the_unlayered_group_as_a_layer():
    # 4 layers of 15 bytes, 2 IPUs, budget 60. Cap 50% = 30 bytes holds two
    # layers (45 > 30). With an unlayered group, IPU 0 holds group + 0 + 1:
    # three of PopLiner's layers, the minimum; layers 2..3 (30) are the last
    # two, fewer than 3, so they may form the last stage.
    with_group = ArrayRanges([15] * 4, [0] * 4, [1] * 4, [0] * 3, has_unlayered=True)
    assert greedy_bounds(with_group, SplitProblem(2, 60)) == (((0, 1), (2, 3)), 0.5, 3)
    # Without a group two layers are short of 3 until the cap holds three:
    # 60% = 36 and 70% = 42 hold two, 80% = 48 holds 0..2 (45), then 3 alone.
    without = ArrayRanges([15] * 4, [0] * 4, [1] * 4, [0] * 3)
    assert greedy_bounds(without, SplitProblem(2, 60)) == (((0, 2), (3, 3)), 0.8, 3)


def test_greedy_short_stage_only_when_fewer_layers_are_left():
    # Layers 10, 10, 10, 40, 10, 10 on up to 3 IPUs, budget 100. Cap 50%:
    # IPU 0 takes 0..2 (30; 70 with layer 3), IPU 1 starts with 3 layers left
    # so it needs 3, but 3..4 = 50 and 3..5 = 60: only 2, the cap fails.
    # Cap 60%: IPU 0 again 0..2, IPU 1 takes 3..5 = 60. A rule that let any
    # stage be short would have taken 0..2 | 3..4 | 5 at 50%.
    table = ArrayRanges([10, 10, 10, 40, 10, 10], [0] * 6, [1] * 6, [0] * 5)
    assert greedy_bounds(table, SplitProblem(3, 100)) == (((0, 2), (3, 5)), 0.6, 3)


def test_greedy_layers_needed_by_hand():
    grouped = ArrayRanges([1] * 5, [0] * 5, [1] * 5, [0] * 4, has_unlayered=True)
    plain = ArrayRanges([1] * 5, [0] * 5, [1] * 5, [0] * 4)
    problem = SplitProblem(3, 100)
    # First stage: the group is one of the 3, so 2 named layers; without it, 3.
    assert layers_needed(grouped, problem, 0, 3) == 2
    assert layers_needed(plain, problem, 0, 3) == 3
    # With a minimum of 1 the group cannot stand in for the stage's only layer.
    assert layers_needed(grouped, problem, 0, 1) == 1
    # Later stages: 3 left (2..4) need 3; 2 left (3..4) need only 1.
    assert [layers_needed(grouped, problem, s, 3) for s in (2, 3, 4)] == [3, 1, 1]
    # The user's minimum is not bent by either rule.
    strict = SplitProblem(3, 100, min_layers=2)
    assert [layers_needed(grouped, strict, s, 3) for s in (0, 3, 4)] == [2, 2, 2]


def test_greedy_prefers_min_three_layers():
    table = flat(6)
    bounds, cap, need = greedy_bounds(table, SplitProblem(2, 60))
    # cap 50% = 30 bytes -> 3 + 3 layers with min 3.
    assert (bounds, cap, need) == (((0, 2), (3, 5)), 0.5, 3)


def test_greedy_may_use_fewer_ipus():
    bounds, _, _ = greedy_bounds(flat(4), SplitProblem(4, 1000))
    assert bounds == ((0, 3),)


def test_greedy_fails_when_too_big():
    assert greedy_bounds(flat(6, mem=60), SplitProblem(2, 100)) is None


def test_dp_min_max_by_hand():
    # cycles 5, 1, 1, 1, 1, 5 over 3 stages: best largest stage is 5.
    table = ArrayRanges([1] * 6, [0] * 6, [5, 1, 1, 1, 1, 5], [0] * 5)
    bounds, value = dp_bounds(table, SplitProblem(3, 1000, exact_ipus=True))
    assert value == 5
    assert bounds == ((0, 0), (1, 4), (5, 5))


def test_ilp_breaks_cost_ties_by_memory():
    # One cycle per layer, any transfer costs one cycle (1000 bytes per cycle):
    # splitting after layer 1 or 2 both give a largest cost of 3; after 1 the
    # largest memory is 20, after 2 it is 30.
    table = ArrayRanges([10] * 4, [0] * 4, [1] * 4, [5, 1, 5], bytes_per_cycle=1000)
    out = ilp_bounds(table, SplitProblem(2, 1000, exact_ipus=True), time_limit=10)
    assert out.bounds == ((0, 1), (2, 3))
    assert out.objectives == (3, 20, 1)
    assert out.optimal


def test_ilp_breaks_memory_ties_by_crossing_bytes():
    # Every range peaks at 10 bytes and there are no cycles: only the bytes
    # crossing the boundary tell the splits apart.
    table = ArrayRanges([0] * 4, [10] * 4, [0] * 4, [5, 1, 5])
    out = ilp_bounds(table, SplitProblem(2, 1000, exact_ipus=True), time_limit=10)
    assert out.bounds == ((0, 1), (2, 3))
    assert out.objectives == (10, 10, 1)


def test_ilp_honours_pins_same_ipu_and_min_layers():
    table = flat(6)
    out = ilp_bounds(table, SplitProblem(3, 1000, exact_ipus=True, split_after=(0,)), time_limit=10)
    assert out.bounds[0] == (0, 0)
    out = ilp_bounds(table, SplitProblem(2, 1000, exact_ipus=True, same_ipu=((1, 4),)), time_limit=10)
    (holding_1,) = [(a, b) for a, b in out.bounds if a <= 1 <= b]
    assert holding_1[1] >= 4  # layers 1 and 4 share an IPU
    assert out.bounds in (((0, 0), (1, 5)), ((0, 4), (5, 5)))
    out = ilp_bounds(table, SplitProblem(3, 1000, exact_ipus=True, min_layers=2), time_limit=10)
    assert all(b - a + 1 >= 2 for a, b in out.bounds)


def test_ilp_memory_is_a_hard_limit():
    table = ArrayRanges([40, 40, 40, 40], [0] * 4, [1, 1, 1, 100], [0] * 3, limit=80)
    out = ilp_bounds(table, SplitProblem(4, 80), time_limit=10)
    for a, b in out.bounds:
        assert table.memory(a, b, 0) <= 80
    assert ilp_bounds(ArrayRanges([90], [0], [1], [], limit=80), SplitProblem(2, 80), time_limit=5) is None


def test_training_stash_changes_the_split():
    # Stash entries weigh most on the first IPU (7 extra... here K=2: depth 3 -> 2 extra).
    table = ArrayRanges([10] * 4, [0] * 4, [1] * 4, [0] * 3, stash=[10] * 4, limit=100)
    problem = SplitProblem(2, 100, exact_ipus=True, training=True)
    out = ilp_bounds(table, problem, time_limit=10)
    (a0, b0), _ = out.bounds
    # First stage with n layers needs 10n + 2*10n <= 100 -> n <= 3.
    assert b0 - a0 + 1 <= 3
    assert table.memory(a0, b0, 2) <= 100


@st.composite
def tables(draw):
    n = draw(st.integers(2, 8))
    base = draw(st.lists(st.integers(1, 30), min_size=n, max_size=n))
    peak = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    cycles = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n))
    cross = draw(st.lists(st.integers(0, 20), min_size=n - 1, max_size=n - 1))
    stash = draw(st.lists(st.integers(0, 5), min_size=n, max_size=n))
    limit = draw(st.integers(40, 150))
    return ArrayRanges(base, peak, cycles, cross, stash=stash, limit=limit), limit


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.integers(1, 4), st.booleans())
def test_ilp_agrees_with_dp_and_never_loses_to_greedy(data, ipus, training):
    table, limit = data
    problem = SplitProblem(ipus, limit, training=training)
    dp = dp_bounds(table, problem)
    ilp = ilp_bounds(table, problem, time_limit=10, prune=False)  # CP-SAT finds objective 1 itself
    greedy = greedy_bounds(table, problem)
    assert (dp is None) == (ilp is None)
    if ilp is None:
        assert greedy is None  # nothing fits: greedy cannot find a split either
        return
    assert ilp.optimal
    assert ilp.objectives[0] == dp[1]
    _check_split(table, problem, ilp.bounds)
    if greedy is not None:
        g_bounds = greedy[0]
        _check_split(table, problem, g_bounds)
        k = len(g_bounds)
        worst = max(_cost(table, a, b, k, j, problem) for j, (a, b) in enumerate(g_bounds))
        assert ilp.objectives[0] <= worst


def _cost(table, a, b, k, position, problem):
    from popliner.pipeline import extra_stash_entries

    extra = extra_stash_entries(position, k) if problem.training else 0
    return range_cost(table, a, b) if table.has_cycles else table.memory(a, b, extra)


def _check_split(table, problem, bounds):
    """Contiguous, covers every layer, every stage fits at its position."""
    from popliner.pipeline import extra_stash_entries

    assert bounds[0][0] == 0 and bounds[-1][1] == table.num_layers - 1
    for (_, b), (c, _) in zip(bounds, bounds[1:]):
        assert c == b + 1
    for k, (a, b) in enumerate(bounds):
        extra = extra_stash_entries(k, len(bounds)) if problem.training else 0
        assert table.memory(a, b, extra) <= problem.budget
    assert len(bounds) <= problem.num_ipus


def test_profile_ranges_match_the_memory_model():
    a = analyse_profile(load_profile(TINY))
    table = a.range_table(10_000)
    for i in range(2):
        for j in range(i, 2):
            total, _ = table._range(i, j)
            assert total.tolist() == table.stage_memory(i, j).total_per_tile.tolist()
    assert table.memory(0, 0, 0) == 422
    assert table.crossing(0) == 30  # emb/out (10) and l0/add/out (20) are used by both layers


def test_profile_ranges_stop_at_the_limit():
    a = analyse_profile(load_profile(TINY))
    table = a.range_table(450)
    assert table.memory(0, 0, 0) == 422
    assert table.memory(0, 1, 0) == math.inf  # 472 > 450
    assert (0, 1) not in table._ranges


def test_solve_split_on_tiny():
    a = analyse_profile(load_profile(TINY))
    split = solve_split(a, SplitProblem(2, 1000), solver="ilp", time_limit=10)
    assert split.status == "OPTIMAL"
    assert [s.layers for s in split.stages] == [("0",), ("1",)]
    # tiny.md's 422 and 235, each plus ceil(30 / 4) = 8 B per tile of copy buffers (30 B cross).
    assert [s.worst_tile_bytes for s in split.stages] == [430, 243]
    assert [s.copy_buffer for s in split.stages] == [8, 8]
    assert [s.cycles for s in split.stages] == [565, 860]
    assert [s.bytes_in for s in split.stages] == [0, 30]
    # 30 bytes at 64 bytes per cycle is one cycle of transfer.
    assert split.objective == 861
    greedy = solve_split(a, SplitProblem(2, 1000), solver="greedy")
    assert [s.layers for s in greedy.stages] == [("0", "1")]
    assert greedy.stages[0].worst_tile_bytes == 472


def test_solve_split_infeasible_names_the_reason():
    a = analyse_profile(load_profile(TINY))
    split = solve_split(a, SplitProblem(2, 300), solver="ilp", time_limit=5)
    assert split.status == "INFEASIBLE" and not split.fits
    assert [s.fits for s in split.stages] == [False, True]  # the best effort: one stage per layer
    assert "layer 0 alone needs 422 bytes on its worst tile" in split.note
    split = solve_split(a, SplitProblem(1, 430), solver="ilp", time_limit=5)
    assert "at least 2 IPUs" in split.note


@pytest.mark.parametrize("solver", ["greedy", "ilp"])
def test_solvers_are_deterministic(solver):
    a = analyse_profile(load_profile(TINY))
    runs = [solve_split(a, SplitProblem(2, 1000), solver=solver, time_limit=5) for _ in range(2)]
    assert [s.stages for s in runs[0:1]] == [s.stages for s in runs[1:2]]
    assert np.isfinite(runs[0].objective)


def test_ilp_respects_its_time_limit_and_returns_its_best():
    import random
    import time

    rng = random.Random(1)
    n = 80
    table = ArrayRanges([rng.randint(5, 20) for _ in range(n)], [rng.randint(0, 30) for _ in range(n)],
                        [rng.randint(100, 1000) for _ in range(n)], [rng.randint(0, 100) for _ in range(n - 1)],
                        limit=200)
    problem = SplitProblem(16, 200)
    start = time.perf_counter()
    rushed = ilp_bounds(table, problem, time_limit=0.01)
    assert time.perf_counter() - start < 5
    assert rushed is not None and not rushed.optimal  # the DP's split, unproved on objectives 2 and 3
    _check_split(table, problem, rushed.bounds)
    full = ilp_bounds(table, problem, time_limit=30)
    assert full.optimal
    assert full.objectives[0] == rushed.objectives[0] == dp_bounds(table, problem)[1]
    assert full.objectives <= rushed.objectives


def test_greedy_minimum_layers_fallback():
    # 4 layers of 40 bytes, 2 IPUs, budget 100. At least 3 layers per stage
    # never fits (120 > 100); at least 2 with a 80% cap packs 2 + 2.
    table = flat(4, mem=40)
    bounds, cap, need = greedy_bounds(table, SplitProblem(2, 100))
    assert (bounds, cap, need) == (((0, 1), (2, 3)), 0.8, 2)


def _brute_force(table, problem):
    """Every contiguous split into at most N stages; the best (cost, memory, crossing) tuple."""
    from itertools import combinations

    from popliner.pipeline import extra_stash_entries

    n = table.num_layers
    best = None
    counts = [problem.num_ipus] if problem.exact_ipus else range(1, problem.num_ipus + 1)
    for k in counts:
        for cuts in combinations(range(n - 1), k - 1):
            bounds, start = [], 0
            for c in (*cuts, n - 1):
                bounds.append((start, c))
                start = c + 1
            costs, mems, crossing = [], [], 0
            for position, (a, b) in enumerate(bounds):
                extra = extra_stash_entries(position, k) if problem.training else 0
                mem = _memory_by_hand(table, a, b, extra)
                if mem > problem.budget:
                    break
                costs.append(range_cost(table, a, b) if table.has_cycles else mem)
                mems.append(mem)
                crossing += table.crossing(b) if b < n - 1 else 0
            else:
                value = (max(costs), max(mems), crossing)
                best = value if best is None or value < best else best
    return best


def _memory_by_hand(table, a, b, extra):
    """ArrayRanges' memory recomputed from its raw lists, not through its method."""
    return max(table._peak[a : b + 1]) + sum(table._base[a : b + 1]) + extra * sum(table._stash[a : b + 1])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.integers(1, 4), st.booleans(), st.booleans())
def test_ilp_equals_brute_force(data, ipus, training, exact):
    table, limit = data
    problem = SplitProblem(ipus, limit, exact_ipus=exact, training=training)
    expected = _brute_force(table, problem)
    for prune in (True, False):
        got = ilp_bounds(table, problem, time_limit=10, prune=prune)
        if expected is None:
            assert got is None
            continue
        assert got.optimal and got.objectives == expected
        # Every stage fits when recomputed independently.
        from popliner.pipeline import extra_stash_entries

        k = len(got.bounds)
        for position, (a, b) in enumerate(got.bounds):
            extra = extra_stash_entries(position, k) if training else 0
            assert _memory_by_hand(table, a, b, extra) <= limit


def test_training_stash_by_hand():
    from tests.helpers import analyse_document

    # Two layers on 2 tiles. Steps: 0 layer0 forward, 1 layer1 forward,
    # 2 layer1 backward, 3 and 4 layer0 backward (its program runs twice).
    # Every program has 1 byte of control code per tile.
    names = ["layer0/fc", "layer1/fc", "layer1/fc_grad", "layer0/fc_grad"]
    vars_of = [[1, 2], [3], [3], [1, 2]]
    doc = {
        "format": "popliner-profile", "version": 1,
        "target": {"tilesPerIpu": 2, "numTiles": 2, "numIpus": 1, "bytesPerTile": 1000, "clockFrequency": 1e9},
        "vertexTypes": [],
        "programs": [{"id": 0, "type": "Sequence", "children": [1, 2, 3, 4]}] + [
            {"id": 1 + i, "type": "OnTileExecute", "debugContext": 100 + i, "controlCode": [1, 1],
             "vars": vars_of[i]} for i in range(4)],
        "controlPrograms": [0],
        "steps": [1, 2, 3, 4, 4],
        # w0: 50 B on tile 0, always live (steps 0..4); act0: 100 B on tile 0,
        # steps 0..3 (forward of layer 0 to its backward); act1: 40 B on tile 1, steps 1..2.
        "variables": {"id": [1, 2, 3], "bytes": [50, 100, 40], "tile": [0, 0, 1], "class": [0, 1, 2]},
        "livenessClasses": [[[0, 5]], [[0, 4]], [[1, 3]]],
        "debugContexts": [{"id": 100 + i, "parent": None, "layer": "popart", "name": n, "data": {"opName": n}}
                          for i, n in enumerate(names)],
    }
    a = analyse_document(doc)
    assert a.mode == "training"
    # One entry: the activations going live in the forward part and dying in the
    # backward part; the always-live weight is not stashed.
    assert stage_stash_entry(a, ["0"], first_stage=True).tolist() == [100, 0]
    assert stage_stash_entry(a, ["1"]).tolist() == [0, 40]
    split = solve_split(a, SplitProblem(2, 1000, exact_ipus=True, training=True), solver="ilp", time_limit=5)
    first, last = split.stages
    # IPU 0 of 2 keeps 2(2-1-0)+1 = 3 entries: 2 more than the profile holds.
    assert (first.stash_entries, first.stash_bytes) == (3, 200)
    # Layer 0 (steps 0..4): w0 (50) + act0 (100) on tile 0, 2 programs x 1 B of
    # control code, plus 2 x 100 of stash.
    assert (first.worst_tile, first.worst_tile_bytes) == (0, 50 + 100 + 2 + 200)
    # The last IPU runs forward and backward back to back: act1 (40) on tile 1
    # and 2 B of control code, no stash.
    assert (last.stash_entries, last.stash_bytes, last.worst_tile_bytes) == (0, 0, 42)


def test_greedy_in_training_plans_stashes_for_the_ipus_it_uses():
    # Planning stashes for all 8 IPUs, IPU 0 would hold 14 extra entries of
    # 10 bytes per layer: nothing fits. One IPU (no stash) holds all 4 layers.
    table = ArrayRanges([10] * 4, [0] * 4, [1] * 4, [0] * 3, stash=[10] * 4, limit=100)
    bounds, cap, need = greedy_bounds(table, SplitProblem(8, 100, training=True))
    assert (bounds, cap, need) == (((0, 3),), 0.5, 3)


def test_time_limit_bounds_the_whole_solve():
    # A limit spent before the exact DP can finish: the best split known by then (greedy's here)
    # comes back as FEASIBLE, valid but not proved optimal, and the note says why. The full solve
    # runs first so that the engine's rows are memoised: greedy then reads them without new work,
    # and only the DP meets the deadline (no row needs extending, so the table never checks it).
    # (solve_bounds itself: solve_split stops before any table when its set-up alone spends the limit.)
    a = analyse_profile(load_profile(TINY))
    full = solve_split(a, SplitProblem(2, 1000), solver="ilp", time_limit=10)
    assert full.status == "OPTIMAL" and "time limit" not in full.note
    split = solve_bounds(a.range_table(1000), SplitProblem(2, 1000), solver="ilp", time_limit=1e-9)
    assert split.status == "FEASIBLE" and split.bounds
    assert "time limit ran out before the exact DP finished" in split.note
    assert split.objective >= full.objective


class _StepClock:
    """A fake ``time`` for popliner.deadline: each reading is one second later than the last."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


def _shared(analysis):
    return analysis.range_memo.state(analysis.facts, PIECES)  # the rows every table of the scenario reuses


def test_range_table_stops_its_rows_at_the_deadline(monkeypatch):
    # The deadline is checked once per layer a row adds. With a clock one second per reading and
    # a deadline at 1.5 s, the first layer of row 0 is evaluated (reading 1.0) and the second is
    # not (reading 2.0): nothing after the deadline runs, and what ran stays memoised.
    monkeypatch.setattr("popliner.deadline.time", _StepClock())
    a = analyse_profile(load_profile(TINY))
    table = a.range_table(1000, deadline=1.5)
    with pytest.raises(OutOfTime):
        table.memory(0, 1, 0)
    assert set(_shared(a).figures) == {(0, 0)}
    assert 0 not in table._done_from  # an interrupted row is extended again on its next read
    # Without the deadline the same table gives the figures of tiny.md (422 and 472 bytes), as a
    # table that never had one does.
    table.deadline = None
    assert [table.memory(0, 0, 0), table.memory(0, 1, 0), table.memory(1, 1, 0)] == [422, 472, 235]
    fresh = analyse_profile(load_profile(TINY)).range_table(1000)
    assert [fresh.memory(0, 0, 0), fresh.memory(0, 1, 0), fresh.memory(1, 1, 0)] == [422, 472, 235]


@pytest.mark.parametrize("solver", ["greedy", "ilp"])
def test_a_deadline_passed_before_the_first_step_stops_the_whole_solve(solver):
    # A limit already spent when the engine is set up: no table is set up, greedy's fill does not
    # run, nor anything after it; no split is known, so the outcome is TIMEOUT (never INFEASIBLE: nothing
    # was proved, issue 39) with no stages, and the note says the time ran out.
    a = analyse_profile(load_profile(TINY))
    split = solve_split(a, SplitProblem(2, 1000), solver=solver, time_limit=0.0)
    assert split.status == "TIMEOUT" and split.stages == ()
    assert "the 0 s time limit ran out while the memory facts were built" in split.note
    assert "nothing was searched" in split.note
    assert _shared(a).figures == {}  # no range evaluated
    assert _shared(a)._parts == {}  # nor any layer's parts built
    # Past the set-up (solve_bounds on a table): the first row read stops the first step (greedy's fill,
    # or the ILP's exact DP: its greedy split is only worked out to seed CP-SAT) and all after it.
    outcome = solve_bounds(a.range_table(1000, deadline=0.0), SplitProblem(2, 1000), solver=solver,
                           time_limit=0.0, started=0.0,
                           relaxed=lambda factor: a.range_table(int(1000 * factor), deadline=0.0, lazy=True))
    assert outcome.status == "TIMEOUT" and outcome.bounds == ()  # nothing proved: never "INFEASIBLE"
    step = "greedy" if solver == "greedy" else "the exact DP"
    assert f"the 0 s time limit ran out before {step} finished" in outcome.note
    assert "before a best-effort split was found" in outcome.note
    assert _shared(a).figures == {}


@pytest.mark.parametrize("solver", ["greedy", "ilp"])
def test_time_limit_bounds_the_best_effort_of_an_infeasible_request(solver):
    # Nothing fits 300 bytes: with no time at all, the fewest-IPUs search and the best effort stop
    # at once and say so; with time, the same request gets its reason and a best-effort split.
    a = analyse_profile(load_profile(TINY))
    rushed = solve_split(a, SplitProblem(2, 300), solver=solver, time_limit=1e-9)
    assert rushed.status == "TIMEOUT"  # the time ran out first: nothing proved
    assert "time limit ran out" in rushed.note
    full = solve_split(a, SplitProblem(2, 300), solver=solver, time_limit=30)
    assert full.status == "INFEASIBLE" and "time limit" not in full.note
    assert full.stages


def _dp_unpruned(table, problem, objective):
    """Every stage count searched, the best kept as dp_bounds always did (first count on ties)."""
    best = None
    counts = [problem.num_ipus] if problem.exact_ipus else range(1, problem.num_ipus + 1)
    for k in counts:
        found = dp_for_stages(table, problem, k, objective)
        if found is not None and (best is None or found[1] < best[1]):
            best = found
    return best


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables(), st.integers(1, 8), st.booleans(), st.booleans(), st.booleans())
def test_pruned_stage_counts_change_nothing(data, ipus, training, by_memory, no_cycles):
    table, limit = data
    if no_cycles:  # the first objective is then memory, and counts are pruned by it
        table._cycles = [0] * table.num_layers
    problem = SplitProblem(ipus, limit, training=training)
    objective = MEMORY if by_memory else None
    assert dp_bounds(table, problem, objective) == _dp_unpruned(table, problem, objective)
    per_count = dp_per_count(table, problem, objective)
    values = {k: found[1] for k, found in per_count.items() if found is not None}
    for k in range(1, ipus + 1):
        found = dp_for_stages(table, problem, k, objective)
        if k in values:
            assert found is not None and found[1] == values[k]
        elif found is not None:  # pruned: it can neither beat nor tie the best count
            assert found[1] > min(values.values())


def test_the_ilp_never_works_out_greedy_when_the_exact_dp_proves_the_optimum(monkeypatch):
    # Greedy stands in only when the exact DP runs out of time: a proved solve never reads its ranges.
    import popliner.solvers.solve as solve_module

    calls: list[int] = []

    def counted(table, problem):
        calls.append(problem.num_ipus)
        return greedy_bounds(table, problem)

    monkeypatch.setattr(solve_module, "greedy_bounds", counted)
    table = ArrayRanges(base=[10] * 6, peak=[0] * 6, cycles=[5, 1, 1, 1, 5, 1], crossing=[3, 1, 4, 1, 5, 0],
                        limit=40)
    proved = solve_bounds(table, SplitProblem(3, 40), solver="ilp")
    assert proved.status == "OPTIMAL" and "CP-SAT not needed" in proved.note
    assert calls == []
