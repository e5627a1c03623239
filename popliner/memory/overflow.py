"""Why a stage overflows: the step of its variable peak on a tile and the largest variables live there."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.memory.model import MemoryModel
from popliner.profile.model import Profile

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
    # Per-step live bytes on this one tile: a difference array over the window.
    live_by_step = np.zeros(hi - lo + 2, np.int64)
    for idx in var.tolist():
        c = int(v.klass[idx])
        for a, b in zip(p.iv_start[p.class_ptr[c] : p.class_ptr[c + 1]].tolist(),
                        p.iv_end[p.class_ptr[c] : p.class_ptr[c + 1]].tolist()):
            a, b = max(a, lo), min(b, hi + 1)
            if a < b:
                live_by_step[a - lo] += v.bytes[idx]
                live_by_step[b - lo] -= v.bytes[idx]
    step = lo + int(np.argmax(np.cumsum(live_by_step)[:-1]))
    alive = [i for i in var.tolist() if _live_at(p, int(v.klass[i]), step)]
    alive.sort(key=lambda i: (-int(v.bytes[i]), i))
    return OverflowDetail(tile, step, tuple(LiveVariable(v.name(i), int(v.bytes[i])) for i in alive[:count]))


def _live_at(p: Profile, c: int, step: int) -> bool:
    a, b = p.class_ptr[c], p.class_ptr[c + 1]
    return bool(np.any((p.iv_start[a:b] <= step) & (step < p.iv_end[a:b])))
