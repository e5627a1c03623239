"""The rules that tie the real-model presets to the real architectures (docs/synthetic-profiles.md).

Expected numbers are hand computations or the real profile's own figures
(graphcore/popliner tests/test_profile.py, the EfficientNet operation
breakdown), never the generator's output.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from popliner.synth import generate_document, plans, preset_spec
from popliner.synth.build import build_model
from popliner.synth.catalog import KERNELS
from popliner.synth.choices import Plan
from popliner.synth.effnet import conv_partials
from popliner.synth.graph import Compiled, Graph, GraphBuilder, TKind
from popliner.synth.layout import lay_out
from popliner.synth.lower import Lowered, lower, size_scale
from popliner.synth.plans import preset_plans
from popliner.synth.spec import SynthSpec

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "calibration_presets.py"
_spec = importlib.util.spec_from_file_location("calibration_presets", SCRIPT)
assert _spec is not None and _spec.loader is not None
cal = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cal)


def _tensor_bytes(preset: str, **changes: object) -> dict[str, int]:
    spec = preset_spec(preset, "inference", **changes)
    g = GraphBuilder(spec.tiles, np.random.default_rng(0), spec.optimizer, Compiled())
    build_model(g, spec)
    return {t.name: t.nbytes for t in g.build().tensors}


def test_edgetpu_blocks_have_the_real_profiles_tensor_sizes() -> None:
    """PopLiner's breakdown of the real profile lists each ReLU's variables: its fp16 output.

    blocks_0/Relu 12,845,056 = 112 x 112 x 128 channels x 4 images x 2 bytes (the expansion of the first block
    takes the 32 filters of i24 at width 1.2, not the stem's 40); blocks_2/Relu 25,690,112 = 112 x 112 x 256 x 4 x 2
    (a fused block's expansion is not strided); blocks_3/Relu 8,028,160 = 56 x 56 x 320 x 4 x 2.
    """
    sizes = _tensor_bytes("efficientnet-edgetpu-l")
    assert sizes["efficientnet/blocks.0/bn/Relu:0"] == 12_845_056
    assert sizes["efficientnet/blocks.1/bn/Relu:0"] == 12_845_056
    assert sizes["efficientnet/blocks.2/bn/Relu:0"] == 25_690_112
    assert sizes["efficientnet/blocks.3/bn/Relu:0"] == 8_028_160
    # The first stage has no skip connection; the second stage's repeats have one.
    assert "efficientnet/blocks.1/add:0" not in sizes and "efficientnet/blocks.3/add:0" in sizes
    # Without the builder (the committed fixture's spec) the first version's blocks stay: strided expansion.
    old = _tensor_bytes("efficientnet-edgetpu-l", edgetpu_builder=False)
    assert old["efficientnet/blocks.2/bn/Relu:0"] == 56 * 56 * 256 * 4 * 2


def test_conv_partials_by_hand() -> None:
    tiles = 1472
    # Blocks 19-23's expansion: 1,408 channels over 14 x 14 x 4 outputs, 176 inputs each = 11 AMP groups; filling
    # the tiles would take 1472 x 16384 / 1,103,872 = 21.8 splits, so the 11 groups cap it.
    assert conv_partials(1408 * 784, 176, tiles) == 1408 * 784 * 11 * 4
    # Block 0's expansion: 6,422,528 outputs over 40 input channels, 2.5 groups (the tiles would allow 3.76).
    assert conv_partials(128 * 112 * 112 * 4, 40, tiles) == 128 * 112 * 112 * 4 * 10
    # Block 2's: 12,845,056 outputs over 32 channels (2 groups); 16,384 partials on every tile allow only 1.88.
    assert abs(conv_partials(256 * 112 * 112 * 4, 32, tiles) - tiles * 16384 * 4) <= 1
    # A convolution with fewer than 16 inputs per output is not split: one set of fp32 partials.
    assert conv_partials(1000, 9, tiles) == 4000


def test_exchange_size_scale_by_hand() -> None:
    assert size_scale(16384) == 1.0
    assert size_scale(4 * 16384) == 2.0
    assert size_scale(0) == math.sqrt(1 / 16384)


def test_poptorch_call_contexts_name_tensors_as_poptorch() -> None:
    doc = generate_document(preset_spec("poptorch-bert-tiny", "training", vocab=512, tiles=16, batch=1, seq=32))
    calls = [c for c in doc["debugContexts"] if (c.get("data") or {}).get("opType") == "Call"]
    assert calls
    names = [n for c in calls for n in c["data"].get("inputs", []) + c["data"].get("outputs", [])]
    assert not [n for n in names if "bert/encoder/layer_" in n]
    assert any("bert.encoder.layer." in n for n in names)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> object:
    from popliner.analysis import load_analysis
    from popliner.synth import write_profile

    path = tmp_path_factory.mktemp("tiny") / "poptorch.json"
    # The masked-LM head (the real profile is SQuAD's): its tied decoder's calls are unnamed calls that read the
    # word embedding, which is what the rule below is about.
    write_profile(preset_spec("poptorch-bert-tiny", "training", vocab=4096, tiles=64, batch=2, var_names=False,
                              head="mlm"), path)
    return load_analysis(str(path), use_cache=False)


def test_unnamed_calls_are_anonymous_as_in_popliner(tiny: object) -> None:
    """PopLiner gives the following operation's layer only to operations named Call; PopTorch's are unnamed.

    The tied decoder's calls read the word embedding, so they are in the first layer (inputs_regex_layer_0), not in
    layer 2 where popliner's own rule (the following operation's layer) puts them.
    """
    a = tiny
    own = a.layers.layer_of_op  # type: ignore[attr-defined]
    anonymous = cal.poplinerlike_layers(a, calls_named_call=False)
    assert np.array_equal(cal.poplinerlike_layers(a, calls_named_call=True), own)
    names, inputs, notes = a.ops.names, a.ops.inputs, a.layers.note  # type: ignore[attr-defined]
    decoder = [i for i in range(len(names)) if notes[i] == "call" and any("word_embeddings" in n for n in inputs[i])]
    assert decoder and all(own[i] == 2 for i in decoder)
    assert all(anonymous[i] == 0 for i in decoder)
    others = [i for i in range(len(names)) if notes[i] == "call" and i not in decoder]
    assert all(anonymous[i] == -1 for i in others)
    assert all(anonymous[i] == own[i] for i in range(len(names)) if notes[i] != "call")


def _graph(spec: SynthSpec) -> Graph:
    g = GraphBuilder(spec.tiles, np.random.default_rng(0), spec.optimizer, Compiled(),
                     preset_plans(spec.model, spec.layers) if spec.planner_inputs else None)
    g.linear_mapping = spec.linear_mapping
    build_model(g, spec)
    return g.build()


def test_tensorflow_caches_each_convolution_shape_once() -> None:
    """TensorFlow's Poplar backend caches a convolution by its input, weights and parameters: same shape, one body.

    By hand from the stage table: blocks 12-17 are stage 3's repeats (same widths, stride 1), so their three
    convolutions call three bodies; block 11 (the stage's first, strided, 112 -> 896 channels from 56) has its
    own. Block 24's 1x1 expansion takes 14 x 14 x 176 to 1,408 channels as blocks 19-23's do, so it calls their
    body; block 5's fused 3x3 expansion takes 56 x 56 x 40 to 320 channels as blocks 3-4's do.
    """
    g = _graph(preset_spec("efficientnet-edgetpu-l"))
    body = {op.logical: op.body for op in g.ops if op.op_type == "Call"}
    convs = [n for n in body if n.endswith("Conv2D")]
    assert len(convs) == 2 + 27 * 2 + 16  # stem, head; two per block; a depthwise in each of the 16 late blocks
    b = "efficientnet/blocks.{}/{}/Conv2D".format
    for name in ("conv2d", "depthwise_conv2d", "conv2d_1"):
        assert len({body[b(i, name)] for i in range(12, 18)}) == 1
        assert body[b(11, name)] != body[b(12, name)]
    assert body[b(24, "conv2d")] == body[b(19, "conv2d")] and body[b(24, "conv2d_1")] != body[b(19, "conv2d_1")]
    assert body[b(5, "conv2d")] == body[b(3, "conv2d")] and body[b(5, "conv2d_1")] != body[b(3, "conv2d_1")]
    # Batch norms are not cached (the real ones are folded element-wise multiplies and adds).
    assert not [n for n in body if "BatchNorm" in n]
    # Without the cache every convolution is an operation of its own.
    plain = _graph(preset_spec("efficientnet-edgetpu-l", shape_cache=False))
    assert not [op for op in plain.ops if op.op_type == "Call"]


def test_a_plan_scales_what_it_names(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan doubles the exchange code, vertex instances and control code of its row's operations, nothing else."""
    from popliner.analysis import load_analysis
    from popliner.synth import write_profile

    totals = {}
    for label, table in (("plain", {}), ("planned", {"no layer": Plan(exchange=2.0, vertices=2.0, programs=2.0)})):
        monkeypatch.setitem(plans._TABLES, "bert-tiny", table)
        path = tmp_path / f"{label}.json"
        write_profile(preset_spec("bert-tiny", var_names=False, planner_inputs=True), path)
        a = load_analysis(str(path), use_cache=False)
        totals[label] = (a.model.per_operation_totals(), a.layers.layer_of_op, list(a.ops.names))
    (plain, layer, names), (planned, _, names2) = totals["plain"], totals["planned"]
    assert names == names2
    kernels = [i for i in range(len(names)) if layer[i] < 0 and not names[i].startswith(("Call(", "Tensor/"))
               and plain[i].vertex_state]
    assert kernels
    for i in kernels:
        # Each DoExchange's code is rounded per tile, so "twice" holds to a few bytes per program and tile.
        assert abs(planned[i].exchange_code - 2 * plain[i].exchange_code) <= 0.01 * plain[i].exchange_code + 64
        assert planned[i].vertex_state == 2 * plain[i].vertex_state
        assert abs(planned[i].control_code - 2 * plain[i].control_code) <= 0.02 * plain[i].control_code + 64
        assert planned[i].vertex_code == plain[i].vertex_code
    # A plan follows the layer in the operation's name: the word embedding's gather (layer 0 by its input) is planned.
    named = [i for i in range(len(names)) if "/layer_" in names[i]]
    assert named and all(planned[i] == plain[i] for i in named)


def test_plan_spread_and_specialised_code_by_hand() -> None:
    """``spread`` widens an operation's tiles; ``code`` gives it vertex types of its own with that much code."""
    g = GraphBuilder(64, np.random.default_rng(0), "sgd", Compiled(), {"no layer": Plan(spread=3.0)})
    x = g.tensor("x", 8 * GraphBuilder.GRAIN, TKind.INPUT)  # 8 tiles
    (y,) = g.op("Relu", "Relu", "relu", "", [x], [(":0", 8 * GraphBuilder.GRAIN)], 1.0)
    op = g.ops[g.tensors[y].producer]
    assert g.tensors[x].count == 8 and op.count == 24
    lowered = _lower_one(Plan(code=2.0))
    special = [vt for vt in lowered.vertex_types if "[specialised x2]" in vt.name]
    assert special
    catalog = {vt.name: vt for k in KERNELS.values() for ph in (*k.pre, k.main, *k.post) for vt, _ in ph.vertices}
    for vt in special:
        assert vt.code == 2 * catalog[vt.name.split(" [")[0]].code


def _lower_one(plan: Plan) -> Lowered:
    spec = preset_spec("resnet-small", layers=1)
    g = GraphBuilder(spec.tiles, np.random.default_rng(0), spec.optimizer, Compiled(), {"no layer": plan})
    build_model(g, spec)
    graph = g.build()
    return lower(graph, lay_out(graph.tensors, spec.tiles, 1.0, spec.bytes_per_tile), 1.0, np.random.default_rng(2))


def test_linear_mapping_never_wraps() -> None:
    """Poplar maps a tensor on a contiguous range of tiles; the generator's default may wrap past the last tile."""
    spec = preset_spec("poptorch-bert-tiny", "training")
    assert spec.linear_mapping and spec.head == "squad"  # the real profile is run_squad.py's
    g = _graph(spec)
    # Tensors on every tile start anywhere (all tiles either way).
    assert all(t.start + t.count <= spec.tiles for t in g.tensors if t.count < spec.tiles)
    wrapped = _graph(spec.replace(linear_mapping=False))
    assert any(t.start + t.count > spec.tiles for t in wrapped.tensors if t.count < spec.tiles)
