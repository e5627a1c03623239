"""The oracle of the liveness grid: sorted +bytes/-bytes events per tile of a growing set of variables.

Until issue 35 it was the range tables' second running liveness path, taken
when the grid (:mod:`popliner.memory.liveness.grid`) was large; its cost
grows with the set (a 1x ILP solve took 1.66x the CPU seconds), so only the
grid is in ``popliner/`` now. Plainer than the grid (one sorted list of
events, no blocks), it is what the grid is held against.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import expand_ranges, unique_inverse
from popliner.profile.model import Profile

__all__ = ["EventList"]


class EventList:
    """Sorted liveness events (+bytes at a start, -bytes at an end) per tile, unclipped.

    Events cover all steps; a window is applied when reading the peak, so
    adding variables never invalidates what is already sorted.
    """

    def __init__(self, profile: Profile) -> None:
        self.p = profile
        self.tile_bits = max(profile.tiles - 1, 1).bit_length()
        self.pos_bits = (profile.num_steps + 1).bit_length() + 1
        self.keys = np.zeros(0, np.int64)
        self.deltas = np.zeros(0, np.int64)

    def add(self, var_idx: np.ndarray, klass: np.ndarray | None = None) -> None:
        """Add variables; ``klass`` as for :meth:`popliner.memory.liveness.SegmentGrid.events_of`."""
        if var_idx.size == 0:
            return
        p = self.p
        v = p.variables
        key = (v.klass if klass is None else klass)[var_idx].astype(np.int64) * p.tiles + v.tile[var_idx]
        uniq, inv = unique_inverse(key)
        nbytes = np.bincount(inv, weights=v.bytes[var_idx]).astype(np.int64)
        cls, tile = uniq // p.tiles, uniq % p.tiles
        counts = p.class_ptr[cls + 1] - p.class_ptr[cls]
        rep = np.repeat(np.arange(len(cls)), counts)
        iv = expand_ranges(p.class_ptr[cls], counts)
        t = tile[rep]
        base = t << self.pos_bits
        keys = np.concatenate((base | (p.iv_end[iv] << 1), base | (p.iv_start[iv] << 1) | 1))
        deltas = np.concatenate((-nbytes[rep], nbytes[rep]))
        keys = np.concatenate((self.keys, keys))
        deltas = np.concatenate((self.deltas, deltas))
        # Two sorted runs: a stable sort (timsort) merges them in linear time.
        order = np.argsort(keys, kind="stable")
        self.keys, self.deltas = keys[order], deltas[order]

    def peak(self, lo: int, hi: int) -> np.ndarray:
        tiles = self.p.tiles
        out = np.zeros(tiles, np.int64)
        if self.keys.size == 0 or hi < lo:
            return out
        running = np.cumsum(self.deltas)
        tile = self.keys >> self.pos_bits
        pos = (self.keys & ((1 << self.pos_bits) - 1)) >> 1
        starts = np.searchsorted(tile, np.arange(tiles))
        before = np.concatenate(([0], running))[starts]  # running total before each tile's events
        rel = running - before[tile]
        # Live bytes at step lo: after every event at or before lo.
        last_at_lo = np.searchsorted(self.keys, (np.arange(tiles, dtype=np.int64) << self.pos_bits)
                                     | (np.int64(lo) << 1) | 1, side="right") - 1
        has = last_at_lo >= starts
        out[has] = rel[last_at_lo[has]]
        inside = (pos > lo) & (pos <= hi)
        if inside.any():
            np.maximum.at(out, tile[inside], rel[inside])
        return np.maximum(out, 0)
