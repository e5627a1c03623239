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
