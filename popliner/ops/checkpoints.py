"""Recomputation checkpoints the model itself carries.

``poptorch.recomputationCheckpoint`` and PopART's ``checkpointOutput`` both
end in an ONNX ``Identity`` named ``Checkpoint`` on the tensor, which a
one-IPU profile records though nothing is recomputed there; what they
change once the model is pipelined is docs/pipeline-config.md's
"Checkpoints in the model".
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np

from popliner.ops.layers import LayerAssignment
from popliner.ops.operations import OperationTable

__all__ = ["checkpoint_operations", "checkpoints_in_every_layer", "layers_with_checkpoints"]

#: The last part of a checkpoint's operation name: ``Checkpoint``, as PopART names it, alone or numbered.
_NAME: Final = re.compile(r"(?:^|/)Checkpoint(?:[_:.]?\d*)$")
#: Operation types a checkpoint is lowered as (empty when the context does not say).
_TYPES: Final = frozenset({"Identity", "IdentityInplace", ""})


def checkpoint_operations(ops: OperationTable, backward: np.ndarray) -> np.ndarray:
    """Bool per operation: a forward recomputation checkpoint."""
    found = np.array([bool(_NAME.search(name)) and kind in _TYPES for name, kind in zip(ops.names, ops.op_type)],
                     bool)
    return np.asarray(found & ~np.asarray(backward, bool))


def layers_with_checkpoints(ops: OperationTable, layers: LayerAssignment, backward: np.ndarray) -> np.ndarray:
    """Bool per layer of ``layers``: it holds at least one forward checkpoint."""
    layer = layers.layer_of_op[checkpoint_operations(ops, backward)]
    has = np.zeros(len(layers.names), bool)
    has[layer[layer >= 0]] = True
    return has


def checkpoints_in_every_layer(ops: OperationTable, layers: LayerAssignment, backward: np.ndarray) -> bool:
    """Does every layer the naming rule found carry a checkpoint (the model is checkpointed per layer)?"""
    has = layers_with_checkpoints(ops, layers, backward)
    return bool(len(has)) and bool(has.all())
