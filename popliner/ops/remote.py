"""Optimizer state that the profile already keeps off chip.

PopART keeps an off-chip tensor in a remote buffer (streaming memory) and moves
it with ``RemoteLoad`` and ``RemoteStore`` operations. That is how optimum's
``optimizer_state_offchip``, PopTorch's
``TensorLocations.setOptimizerLocation(TensorLocationSettings().useOnChipStorage(False))``
and PopART's ``optimizerStateTensorLocationSettings`` are built: in the weight
update, the state is loaded, used and stored back. A profile compiled that way
holds the state only around its update, which the memory model already counts
as it is; what popliner must carry on is the setting, so that the configs it
writes ask the framework for the same thing.

One operation's type is not proof: a ``RemoteLoad`` also moves weights,
activations or a user's own remote buffer. The state counts as streamed only
when a remote operation of the update moves a tensor that PopART names as
optimizer state: its ids start with one of PopART's reserved prefixes
(``reservedOptimizerStatePrefixes()`` in ``willow/src/tensornames.cpp``,
sdk-release-3.4: ``Accl___``, ``Accl1___``, ``Accl2___``, ``Accl3___``,
``Step___``, ``AcclIntoReduce___``, ``AcclIntoUpdate___``,
``AcclOutOfAcclUpdate___``), read from the operation's debug-context
``inputs`` and ``outputs``.
"""

from __future__ import annotations

import re
from typing import Final

import numpy as np

from popliner.ops.operations import OperationTable
from popliner.profile.model import Contexts

__all__ = ["REMOTE_TYPES", "streams_optimizer_state"]

#: PopART's operations between remote buffers and the tiles.
REMOTE_TYPES: Final = frozenset({"RemoteLoad", "RemoteLoadInplace", "RemoteStore"})
#: A tensor id PopART gives optimizer state (at the start of the id or of one of its scope parts).
_STATE_TENSOR: Final = re.compile(
    r"(?:^|/)(?:Accl[123]?|Step|AcclIntoReduce|AcclIntoUpdate|AcclOutOfAcclUpdate)___")


def streams_optimizer_state(ops: OperationTable, update: np.ndarray, contexts: Contexts) -> bool:
    """Does an update operation (``update``: bool per operation) move optimizer state to or from a remote buffer?"""
    flags = np.asarray(update, bool).tolist()
    for op, kind in enumerate(ops.op_type):
        if kind in REMOTE_TYPES and flags[op] and _moves_state(ops, contexts, op):
            return True
    return False


def _moves_state(ops: OperationTable, contexts: Contexts, op: int) -> bool:
    tensors = list(ops.inputs[op])
    data = contexts.data[int(ops.context[op])] or {}
    outputs = data.get("outputs")
    if isinstance(outputs, list):
        tensors += [t for t in outputs if isinstance(t, str)]
    return any(_STATE_TENSOR.search(t) for t in tensors)
