"""Training options on fixtures/profiles/tiny-training.json: exact figures worked by hand in tiny-training.md."""

from __future__ import annotations

import copy
import json
from typing import Any

import numpy as np
import pytest

from popliner.analysis import AnalysisOptions, analyse_profile
from popliner.errors import UsageProblem
from popliner.memory.stages import stage_memory, stage_ops
from popliner.memory.training import TrainingOptions, build_training_view
from popliner.memory.whatif import variable_roles
from popliner.ops.head import head_groups
from popliner.ops.roles import recompute_operations, update_operations
from popliner.profile import load_profile
from popliner.profile.loader import parse_profile_bytes
from tests.helpers import FIXTURES

TINY = FIXTURES / "tiny-training.json"
STATE = ["mE", "vE", "m0", "v0", "m1", "v1", "mh", "vh"]


@pytest.fixture(scope="module")
def tiny():
    return analyse_profile(load_profile(TINY))


def var_names(analysis, mask) -> list[str]:
    v = analysis.profile.variables
    return sorted(v.name(i) for i in np.flatnonzero(mask))


def test_operations_one_per_step(tiny):
    assert tiny.ops.first_step.tolist() == list(range(18))
    assert tiny.ops.names[14] == "Call(9)"
    assert tiny.layer_names == ("0", "1")
    assert tiny.mode == "training"


def test_weight_updates_include_the_call_site_of_an_update_body(tiny):
    upd = update_operations(tiny.profile, tiny.ops)
    assert np.flatnonzero(upd).tolist() == [8, 11, 14, 15, 17]


def test_optimizer_state_is_always_live_and_used_by_updates_only(tiny):
    upd = update_operations(tiny.profile, tiny.ops)
    state = variable_roles(tiny.profile, tiny.ops, tiny.always_live_var, upd, tiny.is_backward)[0]
    assert var_names(tiny, state) == sorted(STATE)
    # The regex replaces the rule; it still takes always-live variables only.
    by_name = variable_roles(tiny.profile, tiny.ops, tiny.always_live_var, upd, tiny.is_backward, r"^m|^x0$")[0]
    assert var_names(tiny, by_name) == sorted(["mE", "m0", "m1", "mh"])


def test_head_and_embedding_groups_by_step_order(tiny):
    upd = update_operations(tiny.profile, tiny.ops)
    groups = head_groups(tiny.ops, tiny.layers.layer_of_op, 2, tiny.is_backward, upd)
    assert np.flatnonzero(groups == 1).tolist() == [5, 6, 7, 8]
    assert np.flatnonzero(groups == 0).tolist() == [0, 16, 17]


def test_last_placement_makes_the_groups_layers():
    layers = analysed(head_placement="last").layers
    assert layers.names == ("embedding", "0", "1", "head")
    assert layers.layer_of_op.tolist() == [0, 1, 1, 2, 2, 3, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 0, 0]


@pytest.mark.parametrize("kwargs", [
    {"recompute": "sometimes"}, {"optimizer_state": "nowhere"}, {"head_placement": "middle"},
    {"replication_factor": 0}, {"sharded_optimizer_state": True}, {"update_regex": "("},
    {"optimizer_state_regex": "["},
])
def test_bad_options_are_usage_problems(kwargs):
    with pytest.raises(UsageProblem):
        TrainingOptions(**kwargs)


# -- a profile compiled with recomputation ----------------------------------------------


def compiled_variant() -> dict[str, Any]:
    """tiny-training with layer 1's ``fc`` cloned before ``layer1/act_grad``, writing ``a1__re``."""
    doc = json.loads(TINY.read_text())
    doc = copy.deepcopy(doc)
    steps = doc["steps"]
    programs = doc["programs"]
    var = doc["variables"]
    vid = max(var["id"]) + 1
    var["id"].append(vid)
    var["bytes"].append(30)
    var["tile"].append(1)
    var["class"].append(len(doc["livenessClasses"]))
    var["name"].append("a1__re")
    # a1 now dies after its forward read (step 4); the clone's copy lives from
    # the clone (inserted as step 9) to layer1/act_grad (now step 10).
    a1 = var["name"].index("a1")
    doc["livenessClasses"][var["class"][a1]] = [[3, 5]]
    doc["livenessClasses"].append([[9, 11]])
    # Every interval at or after step 9 moves one step later.
    for k, cls in enumerate(doc["livenessClasses"][:-1]):
        doc["livenessClasses"][k] = [[s + (s >= 9), e + (e >= 9)] for s, e in cls]
    doc["debugContexts"].append({"id": 900, "parent": None, "layer": "popart", "name": "layer1/fc",
                                 "data": {"opName": "layer1/fc", "opType": "MatMul", "outputs": ["a1__re"]}})
    h0 = var["id"][var["name"].index("h0")]
    w1 = var["id"][var["name"].index("W1")]
    programs.append({"id": 95, "type": "OnTileExecute", "name": "layer1/fc recompute", "debugContext": 900,
                     "vars": [h0, w1, vid], "cycles": [100, 50]})
    programs[0]["children"].insert(programs[0]["children"].index(19), 95)
    steps.insert(9, 95)
    # layer1/act_grad reads the clone's output instead of a1.
    act_grad = next(p for p in programs if p.get("name") == "layer1/act_grad")
    act_grad["vars"] = [vid if x == var["id"][a1] else x for x in act_grad["vars"]]
    return doc


def test_recompute_clone_is_detected_and_belongs_to_the_backward():
    doc = compiled_variant()
    analysis = analyse_profile(parse_profile_bytes(json.dumps(doc).encode(), "compiled.json"))
    clones = recompute_operations(analysis.profile, analysis.ops, analysis.is_backward)
    names = [analysis.ops.names[i] for i in np.flatnonzero(clones)]
    assert names == ["layer1/fc"]
    clone = int(np.flatnonzero(clones)[0])
    assert analysis.ops.first_step[clone] == 9
    view = build_training_view(analysis.profile, analysis.ops, analysis.layers.layer_of_op, 2, analysis.is_backward,
                               TrainingOptions(recompute="every-layer"), counted=np.ones(analysis.ops.count, bool))
    assert view.recompute == "compiled"
    assert view.is_backward[clone]
    assert not view.never_stash.any()
    assert view.notes and "compiled with recomputation" in view.notes[0]


def test_a_backward_op_reading_a_recomputed_tensor_is_no_clone(tiny):
    # Only forward-named operations can be clones: layer1/act_grad reads a1__re but is a gradient.
    doc = compiled_variant()
    analysis = analyse_profile(parse_profile_bytes(json.dumps(doc).encode(), "compiled.json"))
    clones = recompute_operations(analysis.profile, analysis.ops, analysis.is_backward)
    grad = analysis.ops.names.index("layer1/act_grad")
    assert not clones[grad]


# -- figures of a pipeline: model + stash, per IPU (copy buffers left out) -------------------------


def analysed(**kwargs):
    return analyse_profile(load_profile(TINY), AnalysisOptions(training=TrainingOptions(**kwargs)))


def ipu_figures(stages, **kwargs) -> list[list[int]]:
    figures = analysed(**kwargs).pipeline_figures(stages)
    return [(f.memory.total_per_tile + f.stash_per_tile).tolist() for f in figures]


LAST_2 = [["embedding", "0"], ["1", "head"]]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, [[491, 50], [50, 475]]),
    ({"recompute": "every-layer"}, [[431, 50], [50, 445]]),
    ({"recompute": "pipeline"}, [[391, 25], [50, 475]]),
    ({"optimizer_state": "off-chip"}, [[400, 50], [50, 335]]),
    ({"optimizer_state": "off-chip", "recompute": "every-layer"}, [[340, 50], [50, 325]]),
    ({"replication_factor": 2, "sharded_optimizer_state": True}, [[421, 50], [50, 395]]),
    ({"replication_factor": 2, "sharded_optimizer_state": True, "optimizer_state": "off-chip"}, [[350, 50], [50, 315]]),
    ({"replication_factor": 4}, [[491, 50], [50, 475]]),  # replicas without sharding change nothing per IPU
])
def test_two_ipus_head_last_by_hand(kwargs, expected):
    assert ipu_figures(LAST_2, head_placement="last", **kwargs) == expected


def test_three_ipus_embedding_alone_by_hand():
    stages = [["embedding"], ["0"], ["1", "head"]]
    assert ipu_figures(stages, head_placement="last") == [[141, 0], [370, 50], [50, 475]]


def test_head_first_is_todays_model():
    one = analysed().pipeline_figures([["0", "1"]])[0]
    assert one.memory.total_per_tile.tolist() == [310, 320]
    two = analysed().pipeline_figures([["0"], ["1"]])
    assert two[0].stash_entry_per_tile.tolist() == [50, 25]


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({}, [(130, 310), (175, 390)]),
    ({"recompute": "every-layer"}, [(130, 430), (175, 510)]),
    ({"recompute": "pipeline"}, [(130, 440), (175, 390)]),
])
def test_rerun_cycles_by_hand(kwargs, expected):
    figures = analysed(head_placement="last", **kwargs).pipeline_figures(LAST_2)
    assert [(f.forward_cycles, f.backward_cycles) for f in figures] == expected


def test_range_table_agrees_with_the_figures():
    from popliner.pipeline import position_memory

    for kwargs in ({}, {"recompute": "every-layer"}, {"recompute": "pipeline"}, {"optimizer_state": "off-chip"}):
        analysis = analysed(head_placement="last", **kwargs)
        table = analysis.range_table(10_000)
        figures = analysis.pipeline_figures(LAST_2)
        # What the solvers read: the range at its position, with stash entries and copy buffers.
        assert position_memory(table, 0, 1, 0, 2, True) == figures[0].worst_bytes
        assert position_memory(table, 2, 3, 1, 2, True) == figures[1].worst_bytes
        assert table.compute(0, 1) == figures[0].cycles
        assert table.compute(2, 3) == figures[1].cycles


# -- the command line -----------------------------------------------------------------


def run_cli(*args: str):
    from click.testing import CliRunner

    from popliner.cli import cli

    return CliRunner().invoke(cli, [str(TINY), "--solve", "--num-ipus", "2", "--head-placement", "last", *args])


def test_cli_records_the_training_options_in_the_json():
    result = run_cli("--recompute", "every-layer", "--mem-per-tile", "450")
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["training"] == {"recompute": "every-layer", "optimizer_state": "on-chip", "replication_factor": 1,
                               "sharded_optimizer_state": False, "head_placement": "last"}
    # Every 2-IPU split also holds copy buffers: 40 or 50 B crossing (each tensor once) over 2 tiles.
    # Its fullest IPU: embedding 0 1 | head 456, embedding 0 | 1 head 470, embedding | 0 1 head 465
    # (checked below with the figures of each): none fits 450. One IPU holds the whole model, without
    # copy buffers, at 445.
    analysis = analysed(recompute="every-layer", head_placement="last")
    for split in ([["embedding", "0", "1"], ["head"]], [["embedding", "0"], ["1", "head"]],
                  [["embedding"], ["0", "1", "head"]]):
        assert max(f.worst_bytes for f in analysis.pipeline_figures(split)) in (456, 470, 465)
    assert [s["worst_tile_bytes"] for s in doc["stages"]] == [445]


def test_cli_exit_3_names_the_option_that_fits():
    result = run_cli("--mem-per-tile", "460")
    assert result.exit_code == 3
    assert "fits on 2 IPUs with --recompute pipeline" in result.stderr


def test_cli_recompute_auto_takes_the_least_that_fits():
    # With copy buffers (50 B crossing, each tensor once, over 2 tiles = 25 B per tile on each side of
    # the cut): without recomputation the best is one IPU at 475; with pipeline recomputation
    # embedding 0 1 | head holds 391 + 25 = 416 and 220 + 25 = 245. A 450 budget tells them apart.
    assert run_cli("--mem-per-tile", "450").exit_code == 3
    result = run_cli("--mem-per-tile", "450", "--recompute", "auto")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["training"]["recompute"] == "pipeline"
    assert "--recompute auto chose pipeline" in result.stderr


# -- head placement wrap: the head is a stage of its own on IPU 0 (tiny-training.md) ------------------


def worst_with_copy(stages, **kwargs) -> list[tuple[int, int, int]]:
    """(worst tile, its bytes: model + stash + copy buffers, cycles) per IPU."""
    return [(f.worst_tile, f.worst_bytes, f.cycles) for f in analysed(**kwargs).pipeline_figures(stages)]


def test_wrap_two_ipus_by_hand():
    figures = analysed(head_placement="wrap").pipeline_figures([["embedding", "0", "head"], ["1"]])
    # Model + stash per tile: IPU 0 = union of position 0 and the head, with 4 extra entries of 50.
    assert [(f.memory.total_per_tile + f.stash_per_tile).tolist() for f in figures] == [[591, 245], [50, 380]]
    assert [f.stash_entries for f in figures] == [5, 3]
    # IPU 0 receives h1 + dh1 = 50 (into the head) and sends h0 + dh0 = 50, each tensor once:
    # ceil(100 / 2) per tile. Half of each boundary (dh1, dh0: 25) is the gradient sent back.
    assert [(f.bytes_in, f.bytes_out, f.copy_buffer) for f in figures] == [(50, 50, 50), (50, 50, 50)]
    assert [f.gradient_bytes_in for f in figures] == [25, 25]
    assert [(f.forward_cycles, f.backward_cycles, f.head_cycles) for f in figures] == [(130, 310, 185), (120, 260, 0)]


def test_wrap_last_first_compared_by_hand():
    # The same model on 2 IPUs, each placement with its own stash and copy buffers.
    assert worst_with_copy([["0"], ["1"]]) == [(0, 410 + 25, 625), (1, 320 + 25, 380)]
    assert worst_with_copy(LAST_2, head_placement="last") == [(0, 491 + 25, 440), (1, 475 + 25, 565)]
    assert worst_with_copy([["embedding", "0", "head"], ["1"]], head_placement="wrap") == [(0, 641, 625),
                                                                                          (1, 430, 380)]


def test_wrap_three_ipus_embedding_alone_by_hand():
    got = worst_with_copy([["embedding", "head"], ["0"], ["1"]], head_placement="wrap")
    # IPU 0: 120 + dl + dWh (step 7) on tile 1, copy ceil((50 + 40) / 2) = 45; depth 7 of an empty entry.
    # IPU 1: 310 + 4 x 30 (a0) + 45; IPU 2: 320 + 2 x 30 + 50.
    assert got == [(1, 265, 245), (0, 475, 380), (1, 430, 380)]


def test_wrap_on_one_ipu_is_no_pipeline():
    one = analysed(head_placement="wrap").pipeline_figures([["embedding", "0", "1", "head"]])[0]
    last = analysed(head_placement="last").pipeline_figures([["embedding", "0", "1", "head"]])[0]
    assert (one.stash_entries, one.copy_buffer, one.worst_bytes) == (0, 0, 475) == (last.stash_entries,
                                                                                   last.copy_buffer, last.worst_bytes)


@pytest.mark.parametrize("kwargs", [{}, {"recompute": "every-layer"}, {"optimizer_state": "off-chip"},
                                    {"recompute": "pipeline"}])
def test_wrap_range_table_and_range_figure_agree_with_the_placement(kwargs):
    from popliner.pipeline import position_memory, range_figure

    analysis = analysed(head_placement="wrap", **kwargs)
    engine = analysis.facts
    table = analysis.range_table(10_000)
    assert table.num_layers == 3 and table.head_wraps  # the head is not placed by the solvers
    for bounds, names in (([(0, 1), (2, 2)], [["embedding", "0", "head"], ["1"]]),
                          ([(0, 0), (1, 1), (2, 2)], [["embedding", "head"], ["0"], ["1"]]),
                          ([(0, 2)], [["embedding", "0", "1", "head"]])):
        figures = analysis.pipeline_figures(names)
        count = len(bounds)
        for k, (i, j) in enumerate(bounds):
            assert position_memory(table, i, j, k, count, True) == figures[k].worst_bytes
            assert range_figure(engine, i, j, k, count).worst_bytes == figures[k].worst_bytes
            assert table.compute(i, j) == figures[k].cycles


def test_wrap_pipeline_two_ipus_by_hand():
    # tiny-training.md, "wrap with --recompute pipeline": IPU 0's first stage re-runs, the head does not.
    figures = analysed(head_placement="wrap", recompute="pipeline").pipeline_figures(
        [["embedding", "0", "head"], ["1"]])
    assert [(f.memory.total_per_tile + f.stash_per_tile).tolist() for f in figures] == [[391, 220], [25, 370]]
    assert [f.stash_entry_per_tile.tolist() for f in figures] == [[0, 0], [0, 25]]
    assert [f.stash_entries for f in figures] == [5, 3]
    assert [(f.forward_cycles, f.backward_cycles, f.recompute_cycles, f.head_cycles) for f in figures] == [
        (130, 440, 130, 185), (120, 380, 120, 0)]
    assert [(f.worst_tile, f.worst_bytes) for f in figures] == [(0, 441), (1, 420)]


def test_wrap_pipeline_three_ipus_and_embedding_with_head_by_hand():
    got = worst_with_copy([["embedding", "head"], ["0"], ["1"]], head_placement="wrap", recompute="pipeline")
    assert got == [(1, 265, 255), (0, 435, 500), (1, 420, 500)]
    got = worst_with_copy([["embedding", "head"], ["0", "1"]], head_placement="wrap", recompute="pipeline")
    # IPU 1 (layers 0 and 1): forward steps 1-4 (240), backward steps 9-15 (520) and the re-run forward (240).
    assert got == [(1, 265, 255), (0, 395, 240 + 520 + 240)]


def test_wrap_pipeline_on_one_ipu_re_runs_nothing():
    one = analysed(head_placement="wrap", recompute="pipeline").pipeline_figures([["embedding", "0", "1", "head"]])[0]
    assert (one.worst_bytes, one.recompute_cycles, one.cycles) == (475, 0, 1005)


def test_cli_wrap_recompute_auto_chooses_pipeline():
    from click.testing import CliRunner

    from popliner.cli import cli

    # 2 IPUs exactly, 450 bytes: without recomputation the wrapped splits hold 475 and 641; pipeline
    # recomputation takes [embedding 0 + head | 1] to 441 and 420, [embedding + head | 0 1] to 265 and 395
    # (tiny-training.md): both fit, and the solver balances the cycles.
    args = [str(TINY), "--solve", "--num-ipus", "2", "--exact-ipus", "--head-placement", "wrap",
            "--mem-per-tile", "450"]
    assert CliRunner().invoke(cli, args).exit_code == 3
    result = CliRunner().invoke(cli, [*args, "--recompute", "auto"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["training"]["recompute"] == "pipeline" and doc["training"]["head_placement"] == "wrap"
    assert [s["layers"] for s in doc["stages"]] == [["embedding", "0", "head"], ["1"]]
    assert [s["worst_tile_bytes"] for s in doc["stages"]] == [441, 420]
    assert "--recompute auto chose pipeline" in result.stderr


def test_cli_wrap_puts_the_head_on_ipu_0():
    from click.testing import CliRunner

    from popliner.cli import cli

    result = CliRunner().invoke(cli, [str(TINY), "--solve", "--num-ipus", "2", "--exact-ipus", "--head-placement",
                                      "wrap", "--mem-per-tile", "800"])
    assert result.exit_code == 0, result.output
    stages = json.loads(result.stdout)["stages"]
    assert [s["layers"] for s in stages] == [["embedding", "0", "head"], ["1"]]
    assert [s["worst_tile_bytes"] for s in stages] == [641, 430]


# -- copy buffers: what is sent, each tensor once (issue: gradients were counted twice) ------------------


def test_copy_buffers_count_each_sent_tensor_once_by_hand():
    # tiny-training.md: the cut after layer 0 is crossed by h0 (25 B, forwards) and dh0 (25 B, backwards).
    figures = analysed().pipeline_figures([["0"], ["1"]])
    assert [(f.bytes_in, f.bytes_out, f.gradient_bytes_in) for f in figures] == [(0, 50, 0), (50, 0, 25)]
    # 50 B over 2 tiles: 25 per tile on each IPU, not 50 (the gradient is not counted a second time).
    assert [f.copy_buffer for f in figures] == [25, 25]


def test_the_simulator_sends_activations_forwards_and_gradients_back_by_hand():
    from popliner.pipeline import StageLayout
    from popliner.simulator.inputs import IpuFigures, pipeline_stages

    figures = analysed().pipeline_figures([["0"], ["1"]])
    ipus = [IpuFigures(f.forward_cycles, f.backward_cycles, f.memory.total_per_tile, f.stash_entry_per_tile,
                       f.bytes_in, str(k), f.recompute_cycles, f.gradient_bytes_in) for k, f in enumerate(figures)]
    stages = pipeline_stages(StageLayout(2, training=True), ipus)
    # IPU 0 forwards h0 (25 B); IPU 1 (forward and backward) sends dh0 back (25 B); IPU 0's backward sends nothing.
    assert [(s.kind, s.ipu, s.send_bytes) for s in stages] == [("forward", 0, 25), ("forward+backward", 1, 25),
                                                               ("backward", 0, 0)]


def test_a_constant_is_never_sent(tmp_path):
    # GPT-2 (generated): the causal mask and the attention bias are made on the device (a Fill, no host
    # stream) and read by every layer; each IPU holds its own, so a cut sends only the layer output and
    # its gradient: 2 x seq x hidden x 2 bytes (seq 1024, hidden 768, fp16) = 2 x 1,572,864.
    from click.testing import CliRunner

    from popliner.analysis import load_analysis
    from popliner.cli import cli

    path = tmp_path / "gpt2.json"
    result = CliRunner().invoke(cli, ["synth", "--preset", "gpt2-small", "--mode", "training", "--layers", "2",
                                      "--tiles", "64", "-o", str(path)])
    assert result.exit_code == 0, result.output
    analysis = load_analysis(str(path), use_cache=False)
    engine, names = analysis.facts, analysis.profile.variables
    constants = {names.name(int(i)).split("/")[0] for i in engine.boundaries.constant_var.nonzero()[0]}
    assert {"attention_bias", "causal_mask"} <= constants
    assert engine.boundaries.crossing.tolist() == [2 * 1024 * 768 * 2]
    assert engine.boundaries.gradient_crossing.tolist() == [1024 * 768 * 2]


def test_over_budget_ipu_0_under_wrap_names_both_parts():
    from click.testing import CliRunner

    from popliner.cli import cli

    result = CliRunner().invoke(cli, [str(TINY), "--solve", "--num-ipus", "2", "--exact-ipus", "--head-placement",
                                      "wrap", "--mem-per-tile", "200"])
    assert result.exit_code == 3
    assert "IPU 0 with layer embedding and the wrapped head needs" in result.stderr
    assert "(with the operations that have no layer)" not in result.stderr  # with wrap, every operation has one
    engine = analysed(head_placement="wrap").facts
    emb = stage_memory(engine, stage_ops(engine, [0], first_stage=True)).worst_bytes
    head = stage_memory(engine, stage_ops(engine, [engine.layout.head], first_stage=False)).worst_bytes
    assert f"(embedding {emb:,} and head {head:,} on their own worst tiles)" in result.stderr


def test_first_with_a_tied_head_warns_and_points_to_wrap(tmp_path):
    from click.testing import CliRunner

    from popliner.cli import cli

    path = tmp_path / "gpt2.json"
    assert CliRunner().invoke(cli, ["synth", "--preset", "gpt2-small", "--mode", "training", "--layers", "2",
                                    "--tiles", "64", "-o", str(path)]).exit_code == 0
    # PopART's contexts: a tied head is wrapped by default (as Graphcore's PopART BERT runs it); asked first, warned.
    result = CliRunner().invoke(cli, [str(path), "--solve", "--num-ipus", "2", "--head-placement", "first"])
    assert "a tied LM or MLM head" in result.stderr and "--head-placement wrap" in result.stderr
    assert "tied LM" not in CliRunner().invoke(cli, [str(path), "--solve", "--num-ipus", "2"]).stderr
    # The bundled BERT fixture has a SQuAD head (no weight shared with the embedding): no warning.
    bert = TINY.parent / "bert-tiny-training.json"
    assert "tied LM" not in CliRunner().invoke(cli, [str(bert), "--solve", "--num-ipus", "2"]).stderr
