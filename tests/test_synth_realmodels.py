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

from popliner.synth import generate_document, preset_spec
from popliner.synth.build import build_model
from popliner.synth.effnet import conv_partials
from popliner.synth.graph import Compiled, GraphBuilder
from popliner.synth.lower import size_scale

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
