"""What one layer's programs add to a range's memory: the part no option changes.

Read by a range table's running set (:mod:`popliner.memory.running`) and kept
across option sets by :class:`popliner.memory.ranges_shared.SharedParts`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts

__all__ = ["ProgramPart", "program_part"]

#: (additive per tile, the (vertex type, tile) pairs with a vertex, other units or None, first step, last step).
ProgramPart = tuple[np.ndarray, np.ndarray, "np.ndarray | None", int, int]


def program_part(facts: MemoryFacts, ops: np.ndarray) -> ProgramPart:
    """What a layer's programs add (code, state, presence, other units) and its window."""
    p = facts.profile
    progs = p.programs
    tiles = p.tiles
    model = facts.model
    prog = facts.ops.programs_of_set(ops)
    additive = progs.control.sum_rows(prog[model.leaf[prog]], tiles)
    additive += progs.exchange.sum_rows(prog[model.exchange[prog]], tiles)
    presence = np.zeros((len(p.vertex_types.names), tiles + 1), np.int64)
    runs = progs.vertices.runs_of(prog)
    if runs.size:
        assert progs.vertices.key is not None  # the loader always keys vertex counts by type
        vtype = progs.vertices.key[runs].astype(np.int64)
        additive += progs.vertices.sum_runs(runs, tiles, weights=p.vertex_types.size[vtype])
        np.add.at(presence, (vtype, progs.vertices.first[runs]), 1)
        np.add.at(presence, (vtype, progs.vertices.stop[runs]), -1)
    lo, hi = model.window(ops)
    units = model.categories.units(p, prog) if model.categories is not None else None
    # The difference array summed here, once per layer for every option set (the part is memoised).
    return additive, np.cumsum(presence, axis=1)[:, :tiles] > 0, units, lo, hi
