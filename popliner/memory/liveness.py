"""Liveness peaks: the most variable bytes live at once, per tile, over a window of steps.

One vectorised pass serves single stages and many groups at once (every
operation alone, every layer alone): each variable's class intervals,
clipped to its group's window, become +bytes/-bytes changes, and a
cumulative sum gives the running live bytes of every (group, tile); the peak
is its maximum. The distinct interval bounds of the profile cut the steps
into segments of constant liveness, so the changes go into a dense grid of
(group, tile, segment) cells with no sort. A group whose grid would be too
large (a profile with very many distinct bounds) is swept instead: its
variables are aggregated per (liveness class, tile) and the changes sorted.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import expand_ranges, unique_inverse
from popliner.profile.model import Profile

__all__ = ["group_peaks", "live_bytes_at", "window_peak"]


def window_peak(profile: Profile, var_idx: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per-tile peak of live bytes of ``var_idx`` over steps ``lo..hi`` (inclusive)."""
    group = np.zeros(len(var_idx), np.int64)
    return group_peaks(profile, group, var_idx, np.array([lo]), np.array([hi]))[0]


def group_peaks(
    profile: Profile, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Peaks for many groups: returns int64 [groups, tiles].

    ``group[k]`` is the group of variable ``var_idx[k]``; a variable listed twice
    in one group must have been de-duplicated by the caller. Group ``g``
    looks at steps ``lo[g]..hi[g]`` inclusive; a group with ``hi < lo`` peaks at 0.
    """
    tiles = profile.tiles
    num_groups = len(lo)
    out = np.zeros((num_groups, tiles), np.int64)
    if var_idx.size == 0 or num_groups == 0:
        return out
    lo = np.asarray(lo, np.int64)
    hi = np.asarray(hi, np.int64)
    group = np.asarray(group, np.int64)
    ends = np.union1d(profile.iv_start, profile.iv_end)
    if ends.size == 0:
        return out  # no liveness interval at all: nothing is ever live
    # Window of each group in segments (steps ends[k] <= s < ends[k+1]).
    first_col = np.maximum(np.searchsorted(ends, lo, side="right") - 1, 0)
    last_col = np.searchsorted(ends, hi, side="right") - 1
    width = np.where((hi >= lo) & (last_col >= 0), last_col - first_col + 1, 0)
    cells = width * tiles
    # Batches of consecutive groups whose grids fit; a group too wide alone is swept.
    batch_end = np.cumsum(cells)
    g0 = 0
    while g0 < num_groups:
        limit = (batch_end[g0 - 1] if g0 else 0) + _MAX_CELLS
        g1 = max(int(np.searchsorted(batch_end, limit, side="right")), g0 + 1)
        pick = (group >= g0) & (group < g1) if (g0, g1) != (0, num_groups) else slice(None)
        if g1 == g0 + 1 and cells[g0] > _MAX_CELLS:
            out[g0] = _group_peaks_sorted(profile, group[pick] - g0, var_idx[pick], lo[g0:g1], hi[g0:g1])[0]
        else:
            out[g0:g1] = _grid_peaks(profile, ends, group[pick] - g0, var_idx[pick], lo[g0:g1], hi[g0:g1],
                                     first_col[g0:g1], width[g0:g1])
        g0 = g1
    return out


#: Largest grid of (group, tile, segment) cells one pass of ``group_peaks`` builds (int64 each).
_MAX_CELLS = 1 << 23


def _grid_peaks(profile: Profile, ends: np.ndarray, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, first_col: np.ndarray, width: np.ndarray) -> np.ndarray:
    """``group_peaks`` without sorting: a dense grid of live-bytes changes per (group, tile, segment).

    Interval bounds cut the steps into segments in which live bytes are
    constant, so a group's peak on a tile is the largest running sum along
    its row of ``width`` segments (its window). Rows of every group and tile
    lie end to end, so one cumulative sum serves all, each row measured from
    the sum just before it.
    """
    tiles = profile.tiles
    num_groups = len(lo)
    out = np.zeros((num_groups, tiles), np.int64)
    if var_idx.size == 0:
        return out
    row_cells = width.astype(np.int64)
    offset = np.concatenate(([0], np.cumsum(row_cells * tiles)))
    # A group with an empty window keeps nothing: no interval ends after step 2**62.
    lo_eff = np.where(width > 0, lo, np.int64(1) << 62)
    v = profile.variables
    ptr = profile.class_ptr
    cls = v.klass[var_idx]
    counts = (ptr[1:] - ptr[:-1])[cls]
    if bool((counts == 1).all()):
        rep, iv = None, ptr[cls]
        g = group
    else:
        rep = np.repeat(np.arange(len(var_idx)), counts)
        iv = expand_ranges(ptr[cls], counts)
        g = group[rep]
    # Interval [s, e) meets window lo..hi: s <= hi and e > lo (intervals are non-empty).
    iv_end = profile.iv_end[iv]
    keep = np.flatnonzero((profile.iv_start[iv] <= hi[g]) & (iv_end > lo_eff[g]))
    if keep.size == 0:
        return out
    iv, g, iv_end = iv[keep], g[keep], iv_end[keep]
    entry = keep if rep is None else rep[keep]
    b = v.bytes[var_idx[entry]]
    base = offset[g] + v.tile[var_idx[entry]].astype(np.int64) * row_cells[g] - first_col[g]
    # Segment of each interval bound; a start before lo is clipped into lo's segment.
    col_start = np.searchsorted(ends, profile.iv_start)
    col_end = np.searchsorted(ends, profile.iv_end)
    start_cell = base + np.maximum(col_start[iv], first_col[g])
    # Ends after hi are never observed inside the window: no change needed.
    has_end = np.flatnonzero(iv_end <= hi[g])
    end_cell = base[has_end] + col_end[iv[has_end]]
    # float64 bincount: exact while a (group, tile)'s bytes stay below 2**53.
    grid = np.bincount(np.concatenate((start_cell, end_cell)),
                       weights=np.concatenate((b, -b[has_end])), minlength=int(offset[-1]))
    running = np.cumsum(grid.astype(np.int64))
    del grid
    groups_with_rows = np.flatnonzero(row_cells > 0)
    row_g = np.repeat(groups_with_rows, tiles)
    row_t = np.tile(np.arange(tiles, dtype=np.int64), len(groups_with_rows))
    row_start = offset[row_g] + row_t * row_cells[row_g]
    before = np.concatenate(([0], running))[row_start]  # running total before each row
    peaks = np.maximum.reduceat(running, row_start) - before
    out[row_g, row_t] = np.maximum(peaks, 0)
    return out


def _group_peaks_sorted(
    profile: Profile, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """``group_peaks`` by one sort of all events: for groups too wide for a grid."""
    tiles = profile.tiles
    num_groups = len(lo)
    out = np.zeros((num_groups, tiles), np.int64)
    if var_idx.size == 0 or num_groups == 0:
        return out
    v = profile.variables
    agg_group, agg_cls, agg_tile, agg_bytes = _aggregate(group, v.klass[var_idx], v.tile[var_idx], v.bytes[var_idx], tiles)
    # Expand each aggregate into its class's intervals.
    counts = profile.class_ptr[agg_cls + 1] - profile.class_ptr[agg_cls]
    rep = np.repeat(np.arange(len(agg_cls)), counts)
    iv = expand_ranges(profile.class_ptr[agg_cls], counts)
    g = agg_group[rep]
    start = np.maximum(profile.iv_start[iv], lo[g])
    end = np.minimum(profile.iv_end[iv], hi[g] + 1)
    keep = start < end
    rep, g, start, end = rep[keep], g[keep], start[keep], end[keep]
    if rep.size == 0:
        return out
    t = agg_tile[rep].astype(np.int64)
    b = agg_bytes[rep]
    # Ends at hi+1 are never observed inside the window: no event needed.
    has_end = end <= hi[g]
    # One int64 sort key: (group, tile, step, end-before-start). Ends sort
    # first at a step because an interval's end is exclusive.
    tile_bits = max(tiles - 1, 1).bit_length()
    pos_bits = (profile.num_steps + 1).bit_length() + 1
    if (num_groups - 1).bit_length() + tile_bits + pos_bits > 62:
        raise ValueError("too many groups for one sweep; split the call")
    gt = (g << tile_bits) | t
    key_start = (gt << pos_bits) | (start << 1) | 1
    key_end = (gt[has_end] << pos_bits) | (end[has_end] << 1)
    keys = np.concatenate((key_end, key_start))
    deltas = np.concatenate((-b[has_end], b))
    order = np.argsort(keys, kind="stable")
    keys, deltas = keys[order], deltas[order]
    running = np.cumsum(deltas)
    owner = keys >> pos_bits
    first_of_owner = np.flatnonzero(np.concatenate(([True], owner[1:] != owner[:-1])))
    base = np.concatenate(([0], running[:-1]))[first_of_owner]
    peaks = np.maximum.reduceat(running, first_of_owner) - base
    owners = owner[first_of_owner]
    out[owners >> tile_bits, owners & ((1 << tile_bits) - 1)] = np.maximum(peaks, 0)
    return out


def _aggregate(
    group: np.ndarray, cls: np.ndarray, tile: np.ndarray, nbytes: np.ndarray, tiles: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Sum bytes per (group, class, tile): one event pair per distinct triple."""
    key = (group.astype(np.int64) * (int(cls.max()) + 1) + cls.astype(np.int64)) * tiles + tile.astype(np.int64)
    uniq, inverse = unique_inverse(key)
    summed = np.bincount(inverse, weights=nbytes, minlength=len(uniq))
    # float64 bincount is exact below 2**53 bytes per aggregate.
    tile_out = uniq % tiles
    rest = uniq // tiles
    ncls = int(cls.max()) + 1
    return rest // ncls, (rest % ncls).astype(np.int64), tile_out, summed.astype(np.int64)


def live_bytes_at(profile: Profile, var_idx: np.ndarray, tile: int, step: int) -> np.ndarray:
    """Which of ``var_idx`` on ``tile`` are live at ``step`` (bool per entry)."""
    v = profile.variables
    on_tile = v.tile[var_idx] == tile
    cls = v.klass[var_idx]
    live = np.zeros(len(var_idx), bool)
    for k in np.flatnonzero(on_tile):
        c = int(cls[k])
        a, b = int(profile.class_ptr[c]), int(profile.class_ptr[c + 1])
        live[k] = bool(np.any((profile.iv_start[a:b] <= step) & (step < profile.iv_end[a:b])))
    return live
