"""Exact memory figures on fixtures/profiles/tiny.json, worked out by hand in tiny.md."""

from __future__ import annotations

import numpy as np
import pytest

from popliner.analysis import AnalysisOptions, analyse_profile
from popliner.breakdown import affinity_matrix, interlayer_matrix, profile_totals
from popliner.memory.liveness import window_peak
from popliner.profile import load_profile
from tests.helpers import FIXTURES, boundary_bytes, stage_cycles_split

TINY = FIXTURES / "tiny.json"

# Operation order (by first step): see fixtures/profiles/tiny.md.
TENSOR, GATHER, MM0, ADD0, CALL, MM1, RELU, LOSS = range(8)


@pytest.fixture(scope="module")
def tiny():
    return analyse_profile(load_profile(TINY))


def rows(stage):
    return stage.per_tile.tolist()


def test_operations_in_first_step_order(tiny):
    assert tiny.ops.names == (
        "Tensor/w0", "Gather", "layer0/matmul", "layer0/add", "Call(7)", "layer1/matmul", "relu", "loss",
    )
    assert tiny.ops.first_step.tolist() == [0, 1, 2, 4, 5, 6, 7, 9]
    assert tiny.ops.last_step.tolist() == [0, 1, 3, 4, 5, 8, 7, 9]
    # The root Sequence and the host Sync have no debug context.
    assert tiny.ops.unattributed_programs == 2
    assert tiny.ops.reachable_programs == 14


def test_operation_programs_and_variables(tiny):
    ids = tiny.profile.programs.ids
    var_ids = tiny.profile.variables.ids
    assert sorted(ids[tiny.ops.programs_of(CALL)].tolist()) == [6, 11, 13]
    assert sorted(ids[tiny.ops.programs_of(MM1)].tolist()) == [7, 8]
    assert sorted(var_ids[tiny.ops.vars_of(MM0)].tolist()) == [100, 101, 102, 103, 106]
    assert sorted(var_ids[tiny.ops.vars_of(RELU)].tolist()) == [105, 106, 109]


def test_layer_0_per_tile(tiny):
    stage = tiny.model.stage(tiny.layers.ops_of(0))
    assert rows(stage) == [
        [90, 80, 20, 0],  # variables: liveness peak over steps 1..4
        [180, 130, 130, 130],  # vertex code: VA everywhere, VB on tile 0, VC everywhere
        [70, 50, 40, 40],  # vertex state
        [40, 40, 16, 0],  # exchange code
        [22, 22, 12, 12],  # control code of leaf programs
    ]
    assert stage.worst_tile == 0
    assert stage.worst_bytes == 402


def test_layer_1_per_tile(tiny):
    stage = tiny.model.stage(tiny.layers.ops_of(1))
    assert rows(stage) == [
        [50, 15, 20, 25],
        [100, 100, 160, 130],
        [20, 20, 40, 25],  # mm1 runs twice (steps 6 and 8) but is one program
        [0, 0, 0, 0],
        [20, 20, 15, 15],  # Call programs have children: only the Copy leaf counts
    ]
    assert (stage.worst_tile, stage.worst_bytes) == (2, 235)


def test_two_layers_are_not_the_sum_of_each(tiny):
    both = tiny.model.stage(np.arange(GATHER, LOSS))
    assert rows(both) == [
        [100, 80, 20, 25],  # peaks at different steps do not add up
        [180, 130, 190, 130],  # code shared by both layers counted once
        [90, 70, 80, 65],
        [40, 40, 16, 0],
        [42, 42, 27, 27],
    ]
    assert (both.worst_tile, both.worst_bytes) == (0, 452)
    one, two = (tiny.model.stage(tiny.layers.ops_of(k)) for k in (0, 1))
    assert both.summed().variables == 225 < one.summed().variables + two.summed().variables == 300
    assert both.summed().vertex_code == 630 < one.summed().vertex_code + two.summed().vertex_code == 1060
    # Additive parts do add up.
    assert both.summed().vertex_state == one.summed().vertex_state + two.summed().vertex_state


def test_first_stage_adds_unlayered_operations(tiny):
    stage = tiny.stage_memory(["0"], first_stage=True)
    # Tensor/w0's Copy (8 per tile) and loss (control 7 and one VC instance on tile 0);
    # their variables do not count by default.
    assert stage.total_per_tile.tolist() == [402 + 8 + 7 + 5, 322 + 8, 218 + 8, 182 + 8]


def test_all_vars_option_counts_unlayered_variables(tiny):
    everything = analyse_profile(tiny.profile, AnalysisOptions(layered_vars_only=False))
    stage = everything.stage_memory(["0"], first_stage=True)
    # The window grows to steps 0..9 (Tensor/w0 at 0, loss at 9), and loss/out
    # (60 bytes on tile 0, live at 9..10) now counts: tile 0 peaks at step 9
    # with w0/0 (50) + loss/out (60).
    assert stage.per_tile[0].tolist() == [110, 80, 20, 0]


def test_single_operation_figures(tiny):
    totals = tiny.model.per_operation_totals()
    assert totals[MM0].as_tuple() == (170, 250, 80, 96, 28)
    assert totals[ADD0].as_tuple() == (80, 460, 80, 0, 24)
    assert totals[TENSOR].as_tuple() == (0, 0, 0, 0, 32)  # no layer: variables not counted
    # The vectorised per-operation path agrees with evaluating each operation alone.
    for op in range(tiny.ops.count):
        assert totals[op] == tiny.model.stage([op]).summed()


def test_window_peak_by_brute_force(tiny):
    p = tiny.profile
    var = np.arange(p.variables.count)
    for lo, hi in [(0, 10), (2, 4), (5, 8), (9, 9), (3, 2)]:
        expected = np.zeros(p.tiles, np.int64)
        for s in range(lo, hi + 1):
            live = np.zeros(p.tiles, np.int64)
            for v in var:
                c = p.variables.klass[v]
                a, b = p.class_ptr[c], p.class_ptr[c + 1]
                if np.any((p.iv_start[a:b] <= s) & (s < p.iv_end[a:b])):
                    live[p.variables.tile[v]] += p.variables.bytes[v]
            expected = np.maximum(expected, live)
        assert window_peak(p, var, lo, hi).tolist() == expected.tolist()


def test_cycles(tiny):
    assert tiny.op_cycles.tolist() == [5, 100, 350, 80, 0, 800, 60, 30]
    assert sum(stage_cycles_split(tiny, ["0"])) == 530
    assert sum(stage_cycles_split(tiny, ["1"])) == 860
    assert sum(stage_cycles_split(tiny, ["0"], first_stage=True)) == 565


def test_totals_against_ground_truth(tiny):
    got = {row.category: (row.model, row.ground_truth) for row in profile_totals(tiny)}
    assert got["Vertex code"] == (630, 630)
    assert got["Exchange code"] == (96, 96)
    # The ground truth includes the unattributed host Sync (1 byte per tile).
    assert got["Control code"] == (177, 181)


def test_affinity_and_interlayer(tiny):
    aff = affinity_matrix(tiny)
    # Layer 0 uses w0 (100), l0 outputs (60), l0/add out (20), emb out (10).
    # Layer 1 uses l0/add out (20), l1 out (40), emb out (10), l1/tmp (25), relu out (15).
    assert aff.values.tolist() == [[190, 30], [30, 110]]
    inter = interlayer_matrix(tiny)
    # Always-live w0 is left out. l0/mm/out (2 x 30) lives 2..4: layer 0 to 0.
    # l0/add/out (20) and l1/tmp (25) share class 2, steps 4..7: layer 0 to 1;
    # emb/out (10) lives 1..8: layer 0 to 1. l1/mm/out (40) and relu/out (15)
    # live 6..8: layer 1 to 1. loss/out goes live in the loss (no layer).
    assert inter.values.tolist() == [[60, 55], [0, 55]]


def test_boundary_bytes_fast_path_agrees_with_set_intersection():
    from popliner.analysis import load_analysis

    a = load_analysis(str(TINY.parent / "bert-base-training.json.gz"))
    names = a.layer_names
    for cut in range(1, len(names)):
        before = a.model.counted_variables(a.stage_ops(names[:cut], False))
        after = a.model.counted_variables(a.stage_ops(names[cut:], False))
        both = np.intersect1d(before, after)
        both = both[~a.always_live_var[both]]
        assert boundary_bytes(a, names[:cut], names[cut:]) == int(a.profile.variables.bytes[both].sum())
    # A boundary that is not a cut through the layer order takes the general path: the same intersection.
    before = a.model.counted_variables(a.stage_ops([names[0], names[2]], False))
    after = a.model.counted_variables(a.stage_ops([names[1]], False))
    both = np.intersect1d(before, after)
    both = both[~a.always_live_var[both]]
    assert boundary_bytes(a, [names[0], names[2]], [names[1]]) == int(a.profile.variables.bytes[both].sum()) > 0


def test_boundary_bytes_on_tiny(tiny):
    # emb/out (10) and l0/add/out (20) are used by both layers.
    assert boundary_bytes(tiny, ["0"], ["1"]) == 30
