"""``--head-placement wrap``: PopART's stage numbering and stash depths, and the solvers over a wrapped head.

Expected numbers are worked by hand (docs/solvers.md, "--head-placement").
"""

from __future__ import annotations

import numpy as np
import pytest

from popliner.pipeline import (
    backward_stage,
    extra_stash_entries,
    head_stage,
    num_pipeline_stages,
    position_memory,
    range_boundaries,
    range_cost,
    stash_depth,
)
from popliner.solvers.greedy import greedy_bounds
from popliner.solvers.problem import ArrayRanges, SplitProblem
from tests.helpers import FIXTURES, dp_bounds
from tests.ilp_oracle import ilp_bounds


def test_stage_numbering_with_a_wrapped_head():
    # K = 3: forwards 0, 1, 2 on IPUs 0, 1, 2; the head is stage 3 on IPU 0; backwards 4, 5, 6 on IPUs 2, 1, 0.
    assert num_pipeline_stages(True, 3, head_wraps=True) == 7
    assert num_pipeline_stages(False, 3, head_wraps=True) == 4
    assert head_stage(3) == 3
    assert [backward_stage(i, 3, head_wraps=True) for i in range(3)] == [6, 5, 4]
    # Stash: one entry per stage from forward to backward, both included; the last IPU stashes too.
    assert [stash_depth(i, 3, head_wraps=True) for i in range(3)] == [7, 5, 3]
    assert [extra_stash_entries(i, 3, head_wraps=True) for i in range(3)] == [6, 4, 2]
    # One IPU: no pipeline, the head is simply on it.
    assert num_pipeline_stages(True, 1, head_wraps=True) == 1
    assert stash_depth(0, 1, head_wraps=True) == 0
    # Without wrap, nothing changes.
    assert [stash_depth(i, 3) for i in range(3)] == [5, 3, 0]
    assert num_pipeline_stages(True, 3) == 5


def table(limit: float = float("inf"), tiles: int = 0) -> ArrayRanges:
    # Layers: base 10, peak 5, stash 2, 100 cycles; 4 B cross after layers 0 and 1, 6 B go into the head.
    return ArrayRanges([10, 10, 10], [5, 5, 5], [100, 100, 100], [4, 4, 6], [2, 2, 2], limit, tiles=tiles,
                       head=(8, 3, 50))


def test_range_figures_with_a_wrapped_head_by_hand():
    t = table()
    # Position 0 of 2 holds the head: depth 5 (4 extra entries); position 1 depth 3 (2 extra).
    assert position_memory(t, 0, 0, 0, 2, True) == 5 + 10 + 8 + 4 * 2
    assert position_memory(t, 1, 2, 1, 2, True) == 5 + 20 + 2 * 4
    assert position_memory(t, 0, 1, 0, 2, True) == 5 + 20 + 8 + 4 * 4
    # IPU 0 receives what the head takes from the last IPU; one range holding everything receives nothing.
    assert range_boundaries(t, 0, 0) == (6, 4)
    assert range_boundaries(t, 1, 2) == (4, 6)
    assert range_boundaries(t, 0, 2) == (0, 0)
    # Cost: cycles plus received transfer (1 byte per cycle); the head's cycles go with position 0.
    assert range_cost(t, 0, 0) == 100 + 50 + 6
    assert range_cost(t, 1, 2) == 200 + 4
    # Copy buffers over 2 tiles, training: each byte crossing counts once (the gradients are among them):
    # ceil((6 + 4) / 2) = 5 on IPU 0.
    assert position_memory(table(tiles=2), 0, 0, 0, 2, True) == 31 + 5


def test_solvers_agree_on_a_wrapped_head_by_hand():
    # [0 | 1 2] costs max(156, 204) = 204; [0 1 | 2] max(256, 104) = 256.
    problem = SplitProblem(2, 1000, exact_ipus=True, training=True)
    t = table()
    dp = dp_bounds(t, problem)
    assert dp is not None and dp[0] == ((0, 0), (1, 2))
    ilp = ilp_bounds(t, problem, time_limit=10.0, seed=0, hints=[])
    assert ilp is not None and ilp.bounds == ((0, 0), (1, 2)) and ilp.objectives[0] == 204
    assert greedy_bounds(t, SplitProblem(2, 1000, training=True)) is not None


def test_a_wrapped_head_can_make_a_split_infeasible():
    # At 32 bytes: [0 | 1 2] needs 33 on IPU 1, [0 1 | 2] 49 on IPU 0, [0 | 1 | 2] 5 + 10 + 8 + 6 x 2 = 35 on IPU 0.
    # (The table's limit is the budget.)
    assert dp_bounds(table(32), SplitProblem(3, 32, training=True)) is None
    found = dp_bounds(table(35), SplitProblem(3, 35, exact_ipus=True, training=True))
    assert found is not None and found[0] == ((0, 0), (1, 1), (2, 2))


@pytest.mark.parametrize("fixture", ["bert-tiny-training.json", "tiny-training.json"])
def test_wrap_engine_and_range_table_agree_on_every_split_point(fixture):

    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.memory.training import TrainingOptions
    from popliner.pipeline import range_figure

    path = FIXTURES / fixture
    for kwargs in ({}, {"recompute": "every-layer", "optimizer_state": "off-chip"}, {"recompute": "pipeline"}):
        analysis = load_analysis(str(path), AnalysisOptions(training=TrainingOptions(head_placement="wrap", **kwargs)),
                                 use_cache=False)
        engine = analysis.facts
        t = analysis.range_table(10**12)
        n = t.num_layers
        for cut in range(n - 1):
            for k, (i, j) in enumerate(((0, cut), (cut + 1, n - 1))):
                assert position_memory(t, i, j, k, 2, True) == range_figure(engine, i, j, k, 2).worst_bytes, (cut, k)
                assert t.compute(i, j) == range_figure(engine, i, j, k, 2).cycles


@pytest.mark.parametrize(("budget", "fits"), [("450", "fits on 2 IPUs with --recompute pipeline"),
                                              ("390", "fits on 1 IPU with --optimizer-state off-chip")])
def test_exit_3_names_the_option_that_fits_with_a_wrapped_head(budget, fits):
    # tiny-training.md: without options one IPU holds 475 bytes and the 2-IPU splits with the wrapped head
    # 475 and 641. Pipeline recomputation leaves one IPU as it is (475) but takes [embedding + head | 0 1]
    # to 265 and 395: it is tried before every-layer (445 on one IPU), and fits 450, not 390; off-chip
    # optimizer state holds the whole model on one IPU at 335.

    from click.testing import CliRunner

    from popliner.cli import cli

    tiny = FIXTURES / "tiny-training.json"
    result = CliRunner().invoke(cli, [str(tiny), "--solve", "--num-ipus", "2", "--head-placement", "wrap",
                                      "--mem-per-tile", budget])
    assert result.exit_code == 3
    assert fits in result.stderr
    assert "2(K-i)+1 entries on IPU i, the head wrapped" in result.stderr


# -- every view of a wrapped split gives the same figure (as tests/test_one_figure.py) -----------------


@pytest.mark.parametrize(("mode", "recompute"), [("training", "every-layer"), ("inference", "every-layer"),
                                                 ("training", "pipeline")])
def test_every_view_agrees_on_a_wrapped_split(mode, recompute, tmp_path, monkeypatch):
    import json

    from click.testing import CliRunner

    from popliner.analysis import AnalysisOptions, load_analysis
    from popliner.cli import cli
    from popliner.config.yaml_io import read_config
    from tests.test_one_figure import _table_rows

    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    profile = FIXTURES / "bert-tiny-training.json"
    config = tmp_path / "pipeline.yaml"

    def run(*args: object, ok: tuple[int, ...] = (0,)) -> tuple[str, str]:
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code in ok, result.output
        return result.stdout, result.stderr

    out, err = run(profile, "--mode", mode, "--solve", "--num-ipus", 3, "--exact-ipus", "--head-placement", "wrap",
                   "--recompute", recompute, "--optimizer-state", "off-chip", "--config-out", config, ok=(0, 3))
    doc = json.loads(out)
    assert doc["stages"][0]["layers"][0] == "embedding" and doc["stages"][0]["layers"][-1] == "head"
    cfg = read_config(config)
    assert cfg.head_wraps and cfg.model_layers[-1] == "head"
    head = next(p for p in cfg.placements if p.name == "head")
    if mode == "training":
        # 3 IPUs: forwards 0-2, the head at 3 (forward and backward), backwards 4-6; depths 7, 5, 3.
        assert cfg.num_pipeline_stages == 7 and (head.ipu, head.pipeline_stage, head.backward_stage) == (0, 3, 3)
        assert [s["stash_entries"] for s in doc["stages"]] == [7, 5, 3]
    else:
        assert cfg.num_pipeline_stages == 4 and (head.ipu, head.pipeline_stage) == (0, 3)
    check_out, _ = run("check", config, "--profile", profile, ok=(0, 1))
    sim_profile = json.loads(run("simulate", config, "--profile", profile, "--json")[0])
    sim_config = json.loads(run("simulate", config, "--json")[0])
    training = cfg.options.options() if cfg.options is not None else None
    options = AnalysisOptions(mode=mode, training=training) if training else AnalysisOptions(mode=mode)  # type: ignore
    if training is None:
        from popliner.memory.training import TrainingOptions

        options = AnalysisOptions(mode=mode, training=TrainingOptions(head_placement="wrap"))  # type: ignore[arg-type]
    analysis = load_analysis(str(profile), options)
    plot = analysis.stage_results(cfg.layer_groups, cfg.effective_budget)
    views = {
        "solve table": [v for _, v in sorted(_table_rows(err).items())],
        "check": [v for _, v in sorted(_table_rows(check_out).items())],
        "tile plot": [(ipu.worst_tile, ipu.worst_tile_bytes) for ipu in plot],
        "simulate --profile": [(u["worst_tile"], u["peak_bytes"]) for u in sim_profile["ipus"]],
        "simulate (config)": [(u["worst_tile"], u["peak_bytes"]) for u in sim_config["ipus"]],
    }
    expected = [(s["worst_tile"], s["worst_tile_bytes"]) for s in doc["stages"]]
    for view, got in views.items():
        assert got == expected, f"{view} differs from the solve JSON: {got} != {expected}"
    # The wrapped head's copy buffers: IPU 0 receives what the head takes from IPU 2.
    assert doc["stages"][0]["bytes_in"] == doc["stages"][2]["bytes_out"] > 0


# -- a tied LM head, by hand: where its operations go and what crosses ------------------------------------
#
# One tile, one program per step (a call site's copy, then its body), GPT-2's shape in miniature: the head's
# matmuls use the tied word-embedding table E, so the inputs-layer-0 rule puts them in layer 0; `ln_f` and the
# call sites of the head's matmuls get layer 1 by the `inputs` and `call` rules.
#
#   step  operation                   found by (today)       group with last/wrap   variables (bytes)
#    0    embed/Gather                inputs-layer-0 -> 0    embedding              E, x0 (1)
#    1    layer0/fc                   name 0                 0                      x0, W0, h0 (2)
#    2    layer1/fc                   name 1                 1                      h0, W1, h1 (4)
#    3    ln_f                        inputs 1               head                   h1, G, f (8)
#    4    Call(1) (site)              call 1                 head                   -
#    5    lm_head/MatMul (its body)   inputs-layer-0 -> 0    head                   f, E, lg (16)
#    6    loss                        none                   head                   lg, dl (32)
#    7    Call(2) (site)              call 1                 head                   -
#    8    lm_head/MatMul_grad (body)  none                   head                   dl, f, dE (64)
#    9    ln_f_grad                   inputs 1               head                   dl, h1, G, dh1 (128)
#   10    Call(3) (site)              call 1                 1 (its body is named)  -
#   11    layer1/fc_grad (body)       name 1                 1                      dh1, h0, W1, dh0 (256)
#   12    layer0/fc_grad              name 0                 0                      dh0, x0, W0, dx0 (512)
#   13    embed/GradSum               none                   embedding              dx0, dE, gE (1024)
#   14    embed/E/SGD_update          inputs-layer-0 -> 0    embedding              gE, E
#
# E, W0, W1 and G are always live (never crossing). The window of the head: layer 1's operations found by
# name (steps 2 and 11, and the call site of 11 at step 10) end their forward part at step 2 and start their
# backward part at step 10, so steps 3-9 are the head.

_TIED_OPS = [  # (name, inputs, variables, call instance or None)
    ("embed/Gather", ["wte/word_embeddings", "ids"], ["E", "x0"], None),
    ("layer0/fc", [], ["x0", "W0", "h0"], None),
    ("layer1/fc", [], ["h0", "W1", "h1"], None),
    ("ln_f", ["layer1/fc:0", "ln_f/gamma"], ["h1", "G", "f"], None),
    ("lm_head/MatMul", ["ln_f:0", "wte/word_embeddings"], ["f", "E", "lg"], "1"),
    ("loss", ["lm_head/MatMul:0", "labels"], ["lg", "dl"], None),
    ("lm_head/MatMul_grad", ["dl", "ln_f:0"], ["dl", "f", "dE"], "2"),
    ("ln_f_grad", ["dl", "layer1/fc:0"], ["dl", "h1", "G", "dh1"], None),
    ("layer1/fc_grad", [], ["dh1", "h0", "W1", "dh0"], "3"),
    ("layer0/fc_grad", [], ["dh0", "x0", "W0", "dx0"], None),
    ("embed/GradSum", ["embed/Gather_grad", "lm_head/MatMul_grad:0"], ["dx0", "dE", "gE"], None),
    ("embed/E/SGD_update", ["embed/GradSum:0", "wte/word_embeddings"], ["gE", "E"], None),
]
_TIED_BYTES = {"x0": 1, "h0": 2, "h1": 4, "f": 8, "lg": 16, "dl": 32, "dE": 64, "dh1": 128, "dh0": 256, "dx0": 512,
               "gE": 1024, "E": 2048, "W0": 4096, "W1": 8192, "G": 16384}
_ALWAYS_LIVE = ("E", "W0", "W1", "G")


def tied_head_document() -> dict[str, object]:
    """The profile above (format v1): each operation one program at one step; a call site is a copy program."""
    programs: list[dict[str, object]] = []
    contexts: list[dict[str, object]] = []
    main: list[int] = []
    steps: list[int] = []
    var_id = {name: 100 + i for i, name in enumerate(_TIED_BYTES)}
    for name, inputs, variables, call in _TIED_OPS:
        body = {"id": 10 + len(programs), "type": "OnTileExecute", "name": name, "debugContext": 500 + len(contexts),
                "vars": [var_id[v] for v in variables], "cycles": [10]}
        contexts.append({"id": 500 + len(contexts), "parent": None, "layer": "popart", "name": name,
                         "data": {"opName": name, "opType": "Op", "inputs": inputs}})
        if call is None:
            programs.append(body)
            main.append(int(body["id"]))  # type: ignore[call-overload]
            steps.append(int(body["id"]))  # type: ignore[call-overload]
            continue
        site = 500 + len(contexts)
        contexts.append({"id": site, "parent": None, "layer": "popart", "name": "Call",
                         "data": {"instanceId": call, "opType": "Call"}})
        base = 200 + 10 * int(call)
        copy = {"id": base, "type": "Copy", "name": "call args", "debugContext": site, "vars": [], "cycles": [0]}
        seq = {"id": base + 1, "type": "Sequence", "name": "body", "debugContext": body["debugContext"],
               "children": [body["id"]]}
        programs += [copy, {"id": base + 2, "type": "Call", "debugContext": site, "children": [base + 1]}, seq, body]
        main += [base, base + 2]
        steps += [base, int(body["id"])]  # type: ignore[call-overload]
    n = len(steps)
    users: dict[str, list[int]] = {v: [] for v in _TIED_BYTES}
    step_of = {pid: k for k, pid in enumerate(steps)}
    for p in programs:
        if p["type"] == "OnTileExecute":
            for v in p["vars"]:  # type: ignore[attr-defined]
                users[next(k for k, i in var_id.items() if i == v)].append(step_of[int(p["id"])])  # type: ignore
    live = [[[0, n]] if v in _ALWAYS_LIVE else [[min(users[v]), max(users[v]) + 1]] for v in _TIED_BYTES]
    return {
        "format": "popliner-profile", "version": 1,
        "source": {"tool": "hand-written", "model": "tied LM head", "framework": "synthetic"},
        "target": {"tilesPerIpu": 1, "numTiles": 1, "numIpus": 1, "bytesPerTile": 100000,
                   "clockFrequency": 1000000000, "arch": "ipu2"},
        "vertexTypes": [],
        "programs": [{"id": 1, "type": "Sequence", "name": "main", "children": main}, *programs],
        "controlPrograms": [1], "steps": steps,
        "variables": {"id": list(var_id.values()), "bytes": list(_TIED_BYTES.values()), "tile": [0] * len(var_id),
                      "class": list(range(len(var_id))), "name": list(_TIED_BYTES)},
        "livenessClasses": live, "debugContexts": contexts,
    }


def tied_head(placement: str):  # type: ignore[no-untyped-def]
    from popliner.analysis import AnalysisOptions
    from popliner.memory.training import TrainingOptions
    from tests.helpers import analyse_document

    return analyse_document(tied_head_document(),
                            AnalysisOptions(training=TrainingOptions(head_placement=placement)))  # type: ignore


def test_tied_head_fixture_is_the_table_above():
    a = tied_head("first")
    assert a.ops.names == ("embed/Gather", "layer0/fc", "layer1/fc", "ln_f", "Call(1)", "lm_head/MatMul", "loss",
                           "Call(2)", "lm_head/MatMul_grad", "ln_f_grad", "Call(3)", "layer1/fc_grad",
                           "layer0/fc_grad", "embed/GradSum", "embed/E/SGD_update")
    assert a.ops.first_step.tolist() == list(range(15))
    # `first` is today's attribution, unchanged: the head's call sites in layer 1, its matmul bodies and the
    # embedding's gather and update in layer 0 (inputs-layer-0), the rest without a layer.
    assert a.layers.names == ("0", "1")
    assert a.layers.layer_of_op.tolist() == [0, 0, 1, 1, 1, 0, -1, 1, -1, 1, 1, 1, 0, -1, 0]
    assert a.layers.note[0] == a.layers.note[5] == a.layers.note[14] == "inputs-layer-0"
    assert (a.layers.note[3], a.layers.note[4], a.layers.note[9]) == ("inputs", "call", "inputs")


@pytest.mark.parametrize("placement", ["last", "wrap"])
def test_tied_head_operations_go_where_an_engineer_puts_them(placement):
    a = tied_head(placement)
    assert a.layers.names == ("embedding", "0", "1", "head")
    # embedding 0, layer 0 -> 1, layer 1 -> 2, head 3 (the table above).
    assert a.layers.layer_of_op.tolist() == [0, 1, 2, 3, 3, 3, 3, 3, 3, 3, 2, 2, 1, 0, 0]


def test_tied_head_crossing_by_hand_last():
    # Linear order embedding, 0, 1, head. After the embedding: x0 + dx0, and dE (made by the head on the last
    # IPU, summed into the embedding's gradient): 1 + 512 + 64. After layer 0: h0 + dh0 + dE = 322. After
    # layer 1 (into the head): h1 + dh1 + dE = 196.
    assert tied_head("last").facts.boundaries.crossing.tolist() == [577, 322, 196]


def test_tied_head_crossing_by_hand_wrap():
    # The head is on IPU 0 with the embedding: dE, made by the head and used by the embedding only, crosses
    # nothing; h1 and dh1 (layer 1 and the head, not the embedding) go from layer 1 round to the head.
    a = tied_head("wrap")
    engine = a.facts
    assert engine.head_wraps
    assert engine.boundaries.crossing.tolist() == [513, 258, 132]
    # Any two sets of layers use the same rule: {embedding, 1} against {0, head} share x0, dx0, h0, dh0, h1,
    # dh1 (dE is the head's and the embedding's: no crossing): 1 + 512 + 2 + 256 + 4 + 128.
    assert engine.boundaries.boundary_bytes([0, 2], [1, 3]) == 903
    assert tied_head("last").facts.boundaries.boundary_bytes([0, 2], [1, 3]) == 903 + 64
    # Two IPUs [embedding + head | 0 1]: IPU 0 sends x0 + dx0 + ... after the embedding and receives what the
    # head takes from IPU 1.
    from popliner.pipeline import stage_figures

    figures = stage_figures(engine, [[0, 3], [1, 2]])
    assert [(f.bytes_in, f.bytes_out) for f in figures] == [(132, 513), (513, 132)]
    figures = stage_figures(engine, [[0, 1, 3], [2]])
    assert [(f.bytes_in, f.bytes_out) for f in figures] == [(132, 258), (258, 132)]


def test_simulating_a_wrapped_config_alone_runs_the_head_as_its_own_stage(tmp_path, monkeypatch):
    # The config records the head's cycles (IPU 0's `head_cycles`), so the simulator without the profile
    # gives the head's stage K the cycles the profile gives it, and the same step. A config written
    # before it recorded them keeps the head's work in IPU 0's backward stage: the same work per
    # micro-batch on IPU 0, the head's stage empty.
    import json

    import yaml
    from click.testing import CliRunner

    from popliner.cli import cli

    monkeypatch.setenv("POPLINER_CACHE_DIR", str(tmp_path / "cache"))
    profile = FIXTURES / "bert-tiny-training.json"
    config = tmp_path / "pipeline.yaml"

    def run(*args: object) -> str:
        result = CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.stdout

    run(profile, "--solve", "--num-ipus", 3, "--exact-ipus", "--head-placement", "wrap", "--recompute", "every-layer",
        "--config-out", config)
    doc = yaml.safe_load(config.read_text(encoding="utf-8"))
    head = doc["stages"][0]["predicted"]["head_cycles"]
    assert head > 0 and all("head_cycles" not in s["predicted"] for s in doc["stages"][1:])
    from_profile = json.loads(run("simulate", config, "--profile", profile, "--json"))
    from_config = json.loads(run("simulate", config, "--json"))
    assert from_config["stages"] == from_profile["stages"]
    assert from_config["step_cycles"] == from_profile["step_cycles"]
    cycles = {s["index"]: s["cycles"] for s in from_config["stages"]}
    assert cycles[3] == head  # K = 3: the head's stage
    del doc["stages"][0]["predicted"]["head_cycles"]
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    before = {s["index"]: s["cycles"] for s in json.loads(run("simulate", old, "--json"))["stages"]}
    assert before[3] == 0 and before[6] == cycles[6] + head  # IPU 0's backward is stage 2K = 6
    assert {k: v for k, v in before.items() if k not in (3, 6)} == {k: v for k, v in cycles.items() if k not in (3, 6)}


def test_head_window_falls_back_when_no_named_operation_is_forward():
    # As if layer1/fc (step 2) were found by its inputs: no operation of layer 1 found by name runs before
    # its backward (steps 10-11), so the window would open at step 0 and take the embedding's gather. All
    # of layer 1's operations bound it instead (today's window): forward end step 4 (Call(1)), backward
    # start step 7 (Call(2), whose body is a gradient): the head is steps 5 and 6, nothing moves.
    from popliner.ops.head import head_groups
    from popliner.ops.roles import called_operations, update_operations

    a = tied_head("first")
    notes = list(a.layers.note)
    notes[2] = "inputs"
    called = called_operations(a.profile, a.ops)
    backward = a.is_backward | (a.is_backward[np.maximum(called, 0)] & (called >= 0))
    groups = head_groups(a.ops, a.layers.layer_of_op, 2, backward, update_operations(a.profile, a.ops, called=called),
                         notes, called)
    assert np.flatnonzero(groups == 1).tolist() == [5, 6]
    assert np.flatnonzero(groups == 0).tolist() == [0, 8, 13, 14]
    # With the notes as found, the named window (steps 3-9) holds the head of the table above.
    groups = head_groups(a.ops, a.layers.layer_of_op, 2, backward, update_operations(a.profile, a.ops, called=called),
                         a.layers.note, called)
    assert np.flatnonzero(groups == 1).tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert np.flatnonzero(groups == 0).tolist() == [0, 13, 14]
