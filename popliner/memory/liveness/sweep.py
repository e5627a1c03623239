"""One-shot liveness peaks: the most variable bytes live at once, per tile, over a window of steps.

One vectorised sweep serves single stages and many groups at once (every
operation alone, every layer alone): variables are aggregated per
(group, liveness class, tile), their class intervals clipped to the group's
window become +bytes/-bytes events, and one sort plus a cumulative sum gives
the running live bytes of every (group, tile); the peak is its maximum.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import expand_ranges, unique_inverse
from popliner.profile.model import Profile

__all__ = ["group_peak_totals", "group_peaks", "variable_steps", "window_peak"]


#: The dense sweep of :func:`window_peak` is taken when (tiles x distinct event steps) is at most this many
#: times the number of interval events: a bincount and a running sum instead of a sort of the events.
DENSE_FACTOR = 8


def variable_steps(profile: Profile, dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: its first live step and its last (inclusive), -1 for both when it is never live.

    A variable lives in its liveness class's intervals, which are sorted: the first interval's start and
    the last one's end bound it.
    """
    p = profile
    nonempty = np.diff(p.class_ptr) > 0
    starts = np.full(p.num_classes, -1, dtype)
    ends = np.full(p.num_classes, -1, dtype)
    starts[nonempty] = p.iv_start[p.class_ptr[:-1][nonempty]]
    ends[nonempty] = p.iv_end[p.class_ptr[1:][nonempty] - 1] - 1
    return starts[p.variables.klass], ends[p.variables.klass]


def window_peak(profile: Profile, var_idx: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per-tile peak of live bytes of ``var_idx`` over steps ``lo..hi`` (inclusive)."""
    dense = _dense_window_peak(profile, var_idx, lo, hi)
    if dense is not None:
        return dense
    group = np.zeros(len(var_idx), np.int64)
    return np.asarray(group_peaks(profile, group, var_idx, np.array([lo]), np.array([hi]))[0])


def _dense_window_peak(profile: Profile, var_idx: np.ndarray, lo: int, hi: int,
                       factor: float | None = None) -> np.ndarray | None:
    """:func:`window_peak` as a (tile x event step) table of net changes; None when that table would be sparse.

    A large stage has millions of interval events but only a few thousand
    distinct steps at which they happen: summing each step's net change per
    tile (a bincount) and taking the running sum along the steps gives the
    live bytes after each step. The sweep's peak is the same figure: at one
    step its ends come before its starts, so the largest running value at
    that step is the value once all its events are applied.
    """
    tiles = profile.tiles
    if var_idx.size == 0 or hi < lo or tiles == 0:
        return None
    v = profile.variables
    cls = v.klass[var_idx]
    counts = profile.class_ptr[cls + 1] - profile.class_ptr[cls]
    rep = np.repeat(np.arange(len(var_idx)), counts)
    iv = expand_ranges(profile.class_ptr[cls], counts)
    start = np.maximum(profile.iv_start[iv], lo)
    end = np.minimum(profile.iv_end[iv], hi + 1)
    keep = start < end
    if not keep.any():
        return np.zeros(tiles, np.int64)
    rep, start, end = rep[keep], start[keep], end[keep]
    has_end = end <= hi  # ends at hi+1 are never observed inside the window
    steps = np.concatenate((start, end[has_end])).astype(np.int64) - lo
    present = np.bincount(steps, minlength=hi - lo + 1) > 0
    distinct = int(present.sum())
    if tiles * distinct > (DENSE_FACTOR if factor is None else factor) * steps.size:
        return None
    column = np.cumsum(present) - 1
    tile = v.tile[var_idx].astype(np.int64)[rep]
    nbytes = v.bytes[var_idx].astype(np.int64)[rep]
    cells = np.concatenate((tile, tile[has_end])) * distinct + column[steps]
    delta = np.concatenate((nbytes, -nbytes[has_end]))
    # float64 bincount: exact while a (tile, step) net change is below 2**53 bytes.
    table = np.bincount(cells, weights=delta, minlength=tiles * distinct).astype(np.int64).reshape(tiles, distinct)
    np.cumsum(table, axis=1, out=table)
    return np.asarray(np.maximum(table.max(axis=1), 0))


def group_peaks(
    profile: Profile, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """Peaks for many groups: returns int64 [groups, tiles].

    ``group[k]`` is the group of variable ``var_idx[k]``; a variable listed twice
    in one group must have been de-duplicated by the caller. Group ``g``
    looks at steps ``lo[g]..hi[g]`` inclusive; a group with ``hi < lo`` peaks at 0.
    """
    out = np.zeros((len(lo), profile.tiles), np.int64)
    owners, tiles_of, peaks = _owner_peaks(profile, group, var_idx, lo, hi)
    out[owners, tiles_of] = peaks
    return out


def group_peak_totals(
    profile: Profile, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> np.ndarray:
    """:func:`group_peaks` summed over tiles: int64 [groups], without the dense [groups, tiles] table.

    Every operation alone needs only this sum; the dense table cost (groups x
    tiles): 100,000 operations on 65,536 tiles took 27 s of CPU and 2.2 GB.
    """
    owners, _, peaks = _owner_peaks(profile, group, var_idx, lo, hi)
    out = np.zeros(len(lo), np.int64)
    np.add.at(out, owners, peaks)  # int64 throughout: exact
    return out


def _owner_peaks(
    profile: Profile, group: np.ndarray, var_idx: np.ndarray, lo: np.ndarray, hi: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The sweep of :func:`group_peaks`: (group, tile, peak) of every (group, tile) with events, each once."""
    tiles = profile.tiles
    num_groups = len(lo)
    none = np.zeros(0, np.int64)
    if var_idx.size == 0 or num_groups == 0:
        return none, none, none
    v = profile.variables
    agg_group, agg_cls, agg_tile, agg_bytes = _aggregate(group, v.klass[var_idx], v.tile[var_idx], v.bytes[var_idx],
                                                         tiles)
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
        return none, none, none
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
    return owners >> tile_bits, owners & ((1 << tile_bits) - 1), np.maximum(peaks, 0)


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
