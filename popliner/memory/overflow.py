"""Why a stage overflows: the step of its variable peak on a tile and the largest variables live there."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.arrays import expand_ranges
from popliner.memory.model import MemoryModel
from popliner.memory.timeline import live_bytes_per_step

__all__ = ["LiveVariable", "OverflowDetail", "overflow_detail"]


@dataclass(frozen=True)
class LiveVariable:
    name: str
    bytes: int


@dataclass(frozen=True)
class OverflowDetail:
    """On ``tile``, the stage's variables peak at ``step`` (-1 when it has none there)."""

    tile: int
    step: int
    largest_live: tuple[LiveVariable, ...]


def overflow_detail(model: MemoryModel, ops: np.ndarray, tile: int, count: int = 5) -> OverflowDetail:
    """The step where the set's counted variables peak on ``tile``, and the largest live at it."""
    p = model.profile
    lo, hi = model.window(ops)
    v = p.variables
    var = model.counted_variables(ops)
    var = var[v.tile[var] == tile]
    if var.size == 0 or hi < lo:
        return OverflowDetail(tile, -1, ())
    step = lo + int(np.argmax(live_bytes_per_step(p, var, lo, hi)))
    # Every liveness interval of those variables at once: its owner (position in ``var``) and bounds.
    klass = v.klass[var]
    counts = p.class_ptr[klass + 1] - p.class_ptr[klass]
    interval = expand_ranges(p.class_ptr[klass], counts)
    owner = np.repeat(np.arange(var.size), counts)
    start, end = p.iv_start[interval], p.iv_end[interval]
    live = np.zeros(var.size, bool)
    live[owner[(start <= step) & (step < end)]] = True
    alive = var[live].tolist()
    alive.sort(key=lambda i: (-int(v.bytes[i]), i))
    return OverflowDetail(tile, step, tuple(LiveVariable(v.name(i), int(v.bytes[i])) for i in alive[:count]))
