"""Framework naming: the generator's PopART names rewritten as PopTorch or TensorFlow would write them.

The generator names operations as PopART does (``bert/encoder/layer_3/...``,
``resnet/blocks.3/...``) in ``popart`` debug contexts. Two other spellings,
for presets calibrated to real profiles compiled from those frameworks:

- ``poptorch``: the operation's context is a ``poptorch`` one whose
  ``op_name`` is the module path then the op (``bert.encoder.layer.3/attention/...``,
  as Hugging Face modules are named), found by the ``huggingface`` layer preset;
- ``tensorflow``: an ``xla_op`` context whose ``op_name`` is the Keras scope
  (``resnet/model/blocks_3/...``, ``efficientnet/model/blocks_3/...``), found by the default
  (``popart``) regex.

Only names change: programs, tiles, bytes and liveness are the same.

``popliner synth --framework`` (:func:`name_contexts`) renames only the
framework layers above Poplar's, all that popliner reads to tell frameworks
apart (popliner.framework); docs/synthetic-profiles.md, ``framework``, says
which each writes. PopTorch builds the PopART graph from its own traced
graph, not from ONNX; TensorFlow lowers XLA operations straight to Poplar.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

__all__ = ["NAMINGS", "SYNTH_FRAMEWORKS", "name_contexts", "rename_contexts"]

NAMINGS: Final = ("popart", "poptorch", "tensorflow")
#: What ``popliner synth --framework`` accepts; ``synthetic`` writes today's profiles unchanged.
SYNTH_FRAMEWORKS: Final = ("synthetic", "popart", "poptorch", "tensorflow")
_FRAMEWORK_LAYERS: Final[dict[str, dict[str, str]]] = {
    "synthetic": {},
    "popart": {},
    "poptorch": {"onnx": "poptorch"},
    "tensorflow": {"onnx": "tensorflow", "popart": "xla_op"},
}

_LAYER = re.compile(r"bert/encoder/layer_(\d+)(?=/|$)")
_BLOCK = re.compile(r"(^|/)(resnet|efficientnet)/blocks\.(\d+)(?=/|$)")
_CNN = re.compile(r"(^|/)(resnet|efficientnet)/(?!model/)")


def _poptorch(name: str) -> str:
    return _LAYER.sub(r"bert.encoder.layer.\1", name)


def _tensorflow(name: str) -> str:
    return _CNN.sub(r"\1\2/model/", _BLOCK.sub(r"\1\2/model/blocks_\3", name))


_RENAMERS: Final[dict[str, tuple[str, Callable[[str], str]]]] = {
    "poptorch": ("poptorch", _poptorch),
    "tensorflow": ("xla_op", _tensorflow),
}


def rename_contexts(contexts: list[dict[str, Any]], naming: str) -> None:
    """Rewrite, in place, every operation context (``popart`` with an ``opName``) in ``naming``."""
    if naming == "popart":
        return
    layer, rename = _RENAMERS[naming]
    for c in contexts:
        data = c.get("data")
        if c.get("layer") != "popart" or not data:
            continue
        if "opName" not in data:
            if naming == "tensorflow" and data.get("opType") == "Call" and data.get("outputs"):
                # TensorFlow has no Call operation: the operation that calls a cached function (a convolution) is
                # the XLA operation itself, named as its output is (``<op>:0``), its type the name's last part.
                name = rename(str(data["outputs"][0]).rsplit(":", 1)[0])
                new = {"op_name": name, "op_type": name.rsplit("/", 1)[-1],
                       "inputs": [rename(n) for n in data.get("inputs", [])],
                       "outputs": [rename(n) for n in data["outputs"]]}
                c["layer"], c["name"], c["data"] = layer, name, new
                continue
            if naming == "poptorch" and data.get("opType") == "Call":
                # PopTorch's call sites keep PopART's context (an empty name) but name their tensors as
                # PopTorch does, so that a layer rule reading a call's inputs sees PopTorch's spelling.
                for key in ("inputs", "outputs"):
                    if key in data:
                        data[key] = [rename(n) for n in data[key]]
            continue
        new = {"op_name": rename(data["opName"]), "op_type": data.get("opType", "")}
        for key in ("inputs", "outputs"):
            if key in data:
                new[key] = [rename(n) for n in data[key]]
        c["layer"], c["name"], c["data"] = layer, rename(c.get("name", "")), new


def name_contexts(contexts: list[dict[str, Any]], framework: str) -> list[dict[str, Any]]:
    """The contexts with their framework layers renamed for ``framework`` (the same list when nothing changes)."""
    rename = _FRAMEWORK_LAYERS[framework]
    if not rename:
        return contexts
    return [{**c, "layer": rename.get(c["layer"], c["layer"])} for c in contexts]
