"""Debug contexts as each framework names them, so that framework detection is tested on every one.

The generator lowers operations the way PopART does from an ONNX model: an
``onnx`` context per forward node, a ``popart`` context per operation under
it, ``poplibs``/``poplar`` contexts below. The other frameworks differ only
in the layers above Poplar's, which is all that popliner reads to tell them
apart (popliner.framework):

- ``popart`` and ``synthetic`` (the default, byte-identical to older
  profiles): as lowered;
- ``poptorch``: PopTorch builds the PopART graph from its own traced graph,
  not from ONNX, so the node above each ``popart`` context is a
  ``poptorch`` one;
- ``tensorflow``: TensorFlow lowers XLA operations straight to Poplar; each
  operation's context is an ``xla_op`` one (TensorFlow's node above it a
  ``tensorflow`` one), and there is no PopART.

Operation names, types and tensors stay the same, so a profile analyses to
the same operations, layers and bytes whatever its framework.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = ["SYNTH_FRAMEWORKS", "name_contexts"]

#: What ``popliner synth --framework`` accepts; ``synthetic`` writes today's profiles unchanged.
SYNTH_FRAMEWORKS: Final = ("synthetic", "popart", "poptorch", "tensorflow")

_RENAME: Final[dict[str, dict[str, str]]] = {
    "synthetic": {},
    "popart": {},
    "poptorch": {"onnx": "poptorch"},
    "tensorflow": {"onnx": "tensorflow", "popart": "xla_op"},
}


def name_contexts(contexts: list[dict[str, Any]], framework: str) -> list[dict[str, Any]]:
    """The contexts with their framework layers renamed for ``framework`` (the same list when nothing changes)."""
    rename = _RENAME[framework]
    if not rename:
        return contexts
    return [{**c, "layer": rename.get(c["layer"], c["layer"])} for c in contexts]
