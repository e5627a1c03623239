"""What layers share and hand on: the bytes behind the review's layer x layer matrices.

Both count variables once each, summed over tiles, from the memory facts'
profile (so the training what-ifs apply as they do to every other figure):

- :func:`shared_bytes`: variables the operations of both layers use (the
  diagonal: every variable a layer uses). Operations without a layer are
  left out;
- :func:`handed_over_bytes`: variables that are not always live, go live at
  a step of the row's layer and die at a step of the column's layer.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import gather_csr, sorted_unique, union_of
from popliner.memory.facts import MemoryFacts
from popliner.memory.stages import steps_of

__all__ = ["handed_over_bytes", "shared_bytes"]


def shared_bytes(facts: MemoryFacts) -> np.ndarray:
    """int64 [layers, layers]: bytes of the variables both layers use."""
    n = facts.num_layers
    values = np.zeros((n, n), np.int64)
    var, lay = _var_layer_pairs(facts)
    nbytes = facts.profile.variables.bytes[var]
    # Pair every (variable, layer) entry with the ones after it within the same variable.
    same_start = np.flatnonzero(np.concatenate(([True], var[1:] != var[:-1])))
    group_len = np.diff(np.append(same_start, len(var)))
    rank = np.arange(len(var)) - np.repeat(same_start, group_len)
    size = np.repeat(group_len, group_len)
    for d in range(int(group_len.max(initial=1))):
        a = np.flatnonzero(rank + d < size)
        b = a + d
        np.add.at(values, (lay[a], lay[b]), nbytes[a])
        if d:
            np.add.at(values, (lay[b], lay[a]), nbytes[a])
    return values


def _var_layer_pairs(facts: MemoryFacts) -> tuple[np.ndarray, np.ndarray]:
    """Distinct (variable, layer) pairs over operations with a layer, sorted by variable."""
    ops = facts.ops
    with_layer = np.flatnonzero(facts.layer_of_op >= 0)
    lens = ops.var_ptr[with_layer + 1] - ops.var_ptr[with_layer]
    var = gather_csr(ops.var_ptr, ops.var_idx, with_layer)
    lay = np.repeat(facts.layer_of_op[with_layer], lens)
    num_layers = max(facts.num_layers, 1)
    key = sorted_unique(var * num_layers + lay)
    return key // num_layers, key % num_layers


def handed_over_bytes(facts: MemoryFacts) -> np.ndarray:
    """int64 [layers, layers]: bytes going live in the row's layer and dying in the column's."""
    n = facts.num_layers
    values = np.zeros((n, n), np.int64)
    p = facts.profile
    if p.num_steps == 0 or n == 0:
        return values
    layer_of_step = np.full(p.num_steps, -1, np.int64)
    owner = facts.ops.op_of_step
    has = owner >= 0
    layer_of_step[has] = facts.layer_of_op[owner[has]]
    used = union_of(facts.ops.var_idx, p.variables.count)
    first, last = steps_of(facts, used)
    ok = (first >= 0) & (last >= 0) & ~facts.always_live_var[used]
    used, first, last = used[ok], first[ok], last[ok]
    src, dst = layer_of_step[first], layer_of_step[last]
    keep = (src >= 0) & (dst >= 0)
    np.add.at(values, (src[keep], dst[keep]), p.variables.bytes[used[keep]])
    return values
