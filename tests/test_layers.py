"""Operation attribution, naming and layer deduction, one case per rule."""

from __future__ import annotations

import logging

import pytest

from popliner.analysis import AnalysisOptions
from popliner.errors import UsageProblem
from popliner.ops.layers import natural_key
from tests.helpers import analyse_document, chain_document


def op(name: str = "", **data: object) -> dict[str, object]:
    ctx: dict[str, object] = {"name": name}
    if data:
        ctx["data"] = data
    return ctx


def layers_and_notes(contexts, **options):
    a = analyse_document(chain_document(contexts), AnalysisOptions(**options))
    return [a.layers.name_of_op(i) for i in range(a.ops.count)], list(a.layers.note), a


def test_layer_from_name():
    layers, notes, _ = layers_and_notes([op(opName="bert/encoder/layer_3/attention/MatMul")])
    assert (layers, notes) == (["3"], ["name"])


@pytest.mark.parametrize("name, layer", [
    ("Layer7/ffn", "7"), ("model/layer.12/x", "12"), ("blocks/4/conv", "4"), ("encoder_2/add", "2"),
    ("decoder_2/add", None), ("mylayer3/x", None),
])
def test_default_regex_variants(name, layer):
    layers, _, _ = layers_and_notes([op(opName=name)])
    assert layers == [layer]


def test_layer_from_inputs_with_dots_as_slashes():
    layers, notes, _ = layers_and_notes([op(opName="Add", inputs=["encoder.layer.5.out", "bias"])])
    assert (layers, notes) == (["5"], ["inputs"])


def test_call_inherits_following_operation_layer():
    layers, notes, _ = layers_and_notes([op("Call", instanceId="3", opType="Call"), op(opName="layer2/mm")])
    assert layers == ["2", "2"]
    assert notes == ["call", "name"]


def test_inputs_regex_layer_0_goes_to_first_layer():
    ctxs = [op(opName="Gather", inputs=["embeddings.word_embeddings.weight"]), op(opName="layer4/mm"),
            op(opName="layer5/mm")]
    layers, notes, a = layers_and_notes(ctxs)
    assert layers == ["4", "4", "5"]
    assert notes[0] == "inputs-layer-0"
    assert a.layer_names == ("4", "5")


def test_tensor_and_unmatched_have_no_layer():
    layers, notes, a = layers_and_notes([op("", tensorId="w0"), op(opName="loss"), op(opName="layer1/x")])
    assert layers == [None, None, "1"]
    assert notes == ["tensor", "none", "name"]
    assert a.ops.names[0] == "Tensor/w0"


def test_names_for_empty_contexts():
    _, _, a = layers_and_notes([op(""), op("", instanceId="9"), op("ctx-name")])
    assert a.ops.names == ("Anonymous", "Call(9)", "ctx-name")


def test_operation_is_nearest_operation_layer_context():
    ctxs = [
        {"name": "outer", "layer": "onnx", "data": {"opName": "layer9/outer"}},
        {"name": "", "layer": "popart", "parent": 0, "data": {"opName": "layer1/op"}},
        {"name": "cs", "layer": "poplibs", "parent": 1},
    ]
    a = analyse_document(chain_document(ctxs))
    # The poplibs program belongs to the popart context; the onnx root has no
    # operation-layer ancestor and is its own operation.
    assert sorted(a.ops.names) == ["layer1/op", "layer9/outer"]
    mm = a.ops.names.index("layer1/op")
    assert len(a.ops.programs_of(mm)) == 2


def test_operation_layers_are_configurable():
    ctxs = [{"name": "", "layer": "poptorch", "data": {"op_name": "block0/lstm"}},
            {"name": "k", "layer": "poplibs", "parent": 0}]
    default = analyse_document(chain_document(ctxs))
    assert default.ops.count == 1  # both programs belong to the poptorch operation
    a = analyse_document(chain_document(ctxs), AnalysisOptions(op_layers=("poplibs",)))
    # Now the poplibs context is an operation of its own (named after the
    # nearest op_name up its ancestors), and the poptorch root is another.
    assert a.ops.count == 2
    assert a.ops.names == ("block0/lstm", "block0/lstm")


def test_layer_order_natural_vs_steps():
    ctxs = [op(opName="layer10/a"), op(opName="layer2/b"), op(opName="layer1/c")]
    _, _, by_steps = layers_and_notes(ctxs)
    _, _, natural = layers_and_notes(ctxs, layer_order="natural")
    assert by_steps.layer_names == ("10", "2", "1")
    assert natural.layer_names == ("1", "2", "10")
    assert sorted(["layer10", "layer2", "layer1"], key=natural_key) == ["layer1", "layer2", "layer10"]


def test_warns_when_few_operations_have_a_layer(caplog):
    with caplog.at_level(logging.WARNING, logger="popliner"):
        layers_and_notes([op(opName="a"), op(opName="b"), op(opName="layer0/c")])
    assert any("only 1 of 3 operations" in r.getMessage() for r in caplog.records)


def test_custom_regex_and_bad_regex():
    layers, _, _ = layers_and_notes([op(opName="stage_3/x")], layer_name_regex=r"stage_(\d+)")
    assert layers == ["3"]
    with pytest.raises(UsageProblem, match="--layer-name-regex"):
        layers_and_notes([op(opName="x")], layer_name_regex="(unclosed")


def test_mode_detection():
    _, _, inf = layers_and_notes([op(opName="layer0/mm")])
    _, _, train = layers_and_notes([op(opName="layer0/mm"), op(opName="layer0/mm_grad")])
    assert (inf.mode, train.mode) == ("inference", "training")
    _, _, forced = layers_and_notes([op(opName="layer0/mm")], mode="training")
    assert forced.mode == "training"


# -- presets: real-style operation names of each framework, with the expected layer ------------

PRESET_TABLE = [
    # PopART / TensorFlow-style scopes (today's rule)
    ("popart", "bert/encoder/layer_3/attention/self/query/MatMul", "3"),
    ("popart", "Layer7/ffn/Gelu", "7"),
    ("popart", "gpt2/blocks/11/attn/c_proj/MatMul", "11"),
    ("popart", "bert/embeddings/Gather", None),
    # Hugging Face transformers module paths (PopTorch keeps them as op names)
    ("huggingface", "bert.encoder.layer.3.attention.self.query/MatMul", "bert.encoder.layer.3"),
    ("huggingface", "bert.encoder.layer.11.output.LayerNorm/LayerNorm", "bert.encoder.layer.11"),
    ("huggingface", "roberta.encoder.layer.0.intermediate.dense", "roberta.encoder.layer.0"),
    ("huggingface", "encoder.block.5.layer.0.SelfAttention.q", "encoder.block.5"),
    ("huggingface", "vit.encoder.layer.2.attention.attention.key", "vit.encoder.layer.2"),
    ("huggingface", "bert.embeddings.word_embeddings/Gather", None),
    ("huggingface", "bert.encoder.layer1.x", None),  # no dot before the index: not a module list
    # GPT-2
    ("gpt2", "transformer.h.3.mlp.c_fc/MatMul", "transformer.h.3"),
    ("gpt2", "transformer.h.10.attn.c_attn", "transformer.h.10"),
    ("gpt2", "transformer.wte/Gather", None),
    ("gpt2", "transformer.ln_f/LayerNorm", None),
    # Llama and other decoder-only models
    ("llama", "model.layers.3.self_attn.q_proj/MatMul", "model.layers.3"),
    ("llama", "model.layers.31.mlp.down_proj", "model.layers.31"),
    ("llama", "model.embed_tokens/Gather", None),
    ("llama", "lm_head/MatMul", None),
    # timm
    ("timm", "blocks.3.attn.qkv/MatMul", "blocks.3"),
    ("timm", "stages.1.blocks.2.conv_dw", "stages.1.blocks.2"),
    ("timm", "patch_embed.proj/Conv", None),
    # torchvision ResNets
    ("torchvision", "layer3.1.conv2/Conv", "layer3.1"),
    ("torchvision", "layer1.0.downsample.0/Conv", "layer1.0"),
    ("torchvision", "layer1.1.bn2/BatchNorm", "layer1.1"),
    ("torchvision", "layer2.0.conv1/Conv", "layer2.0"),
    ("torchvision", "conv1/Conv", None),
    ("torchvision", "fc/MatMul", None),
]


@pytest.mark.parametrize("preset, name, layer", PRESET_TABLE)
def test_preset_table(preset, name, layer):
    layers, notes, a = layers_and_notes([op(opName=name)], layer_preset=preset)
    assert layers == [layer], (preset, name)
    assert a.layers.rule == preset


def test_preset_does_not_match_a_longer_index():
    layers, _, _ = layers_and_notes([op(opName="model.layers.12.mlp"), op(opName="model.layers.1.mlp")],
                                    layer_preset="llama")
    assert layers == ["model.layers.12", "model.layers.1"]


@pytest.mark.parametrize("preset", ["huggingface", "gpt2", "llama", "timm", "torchvision"])
def test_auto_picks_the_preset_that_names_most_operations(preset):
    names = [name for p, name, layer in PRESET_TABLE if p == preset and layer is not None]
    _, _, a = layers_and_notes([op(opName=n) for n in names], layer_preset="auto")
    # huggingface also reads Llama's `model.layers.N`; the earlier preset wins a tie with the same layers.
    # popart reads `layer3.1` as layer 3: as many operations, fewer layers, so torchvision wins.
    assert a.layers.rule == ("huggingface" if preset == "llama" else preset)
    assert a.layers.coverage == 1.0


def test_auto_keeps_popart_on_a_tie_and_regex_overrides():
    _, _, a = layers_and_notes([op(opName="model/layer.12/x")])  # popart and huggingface both match
    assert (a.layers.rule, a.layer_names) == ("popart", ("12",))
    _, _, b = layers_and_notes([op(opName="transformer.h.3.mlp")], layer_preset="auto",
                               layer_name_regex=r"h\.(\d+)")
    assert (b.layers.rule, b.layer_names) == ("regex", ("3",))


def test_module_path_inputs_keep_their_dots():
    layers, notes, _ = layers_and_notes([op(opName="Add", inputs=["bert.encoder.layer.5.output.dense.bias"])],
                                        layer_preset="huggingface")
    assert (layers, notes) == (["bert.encoder.layer.5"], ["inputs"])


def test_auto_says_which_preset_and_its_coverage(caplog):
    with caplog.at_level(logging.INFO, logger="popliner"):
        layers_and_notes([op(opName="transformer.h.0.mlp"), op(opName="transformer.wte")])
    assert any("preset gpt2 (auto): 1 layers, 1 of 2 operations (50%)" in r.getMessage() for r in caplog.records)


def test_unknown_preset_is_a_usage_problem():
    with pytest.raises(UsageProblem, match="--layer-preset 'keras'"):
        layers_and_notes([op(opName="x")], layer_preset="keras")
