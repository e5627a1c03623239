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
"""

from __future__ import annotations

from typing import Final

import numpy as np

from popliner.ops.operations import OperationTable

__all__ = ["REMOTE_TYPES", "remote_update_operations", "streamed_state_variables", "streams_optimizer_state"]

#: PopART's operations between remote buffers and the tiles.
REMOTE_TYPES: Final = frozenset({"RemoteLoad", "RemoteLoadInplace", "RemoteStore"})


def streams_optimizer_state(ops: OperationTable, update: np.ndarray) -> bool:
    """Does a weight-update operation (``update``: bool per operation) load or store a remote buffer?"""
    remote = np.array([kind in REMOTE_TYPES for kind in ops.op_type], bool)
    return bool((remote & np.asarray(update, bool)).any())


def remote_update_operations(ops: OperationTable, update: np.ndarray) -> np.ndarray:
    """Bool per operation: a remote load or store of the weight update (``update``: bool per operation)."""
    return np.asarray(np.array([kind in REMOTE_TYPES for kind in ops.op_type], bool) & np.asarray(update, bool))


def streamed_state_variables(ops: OperationTable, update: np.ndarray, num_variables: int) -> np.ndarray:
    """Bool per variable: what a profile compiled with its optimizer state off chip streams each step.

    The variables of the weight update's remote loads and stores (``update``: bool per operation): the
    state's landing tensors on the tiles, each loaded before its update and stored after it.
    """
    remote = remote_update_operations(ops, update)
    out = np.zeros(num_variables, bool)
    lens = np.diff(ops.var_ptr)
    out[ops.var_idx[np.repeat(remote, lens)]] = True
    return out
