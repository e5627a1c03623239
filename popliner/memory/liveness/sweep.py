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

__all__ = ["class_steps", "group_peak_totals", "group_peaks", "variable_steps", "window_peak"]


def variable_steps(profile: Profile, dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per variable: its first live step and its last (inclusive), -1 for both when it is never live.

    A variable lives in its liveness class's intervals, which are sorted: the first interval's start and
    the last one's end bound it.
    """
    starts, ends = class_steps(profile, dtype)
    return starts[profile.variables.klass], ends[profile.variables.klass]


def class_steps(profile: Profile, dtype: type[np.signedinteger] = np.int64) -> tuple[np.ndarray, np.ndarray]:
    """Per liveness class: its first live step and its last (inclusive), -1 for both when it has no interval."""
    p = profile
    nonempty = np.diff(p.class_ptr) > 0
    starts = np.full(p.num_classes, -1, dtype)
    ends = np.full(p.num_classes, -1, dtype)
    starts[nonempty] = p.iv_start[p.class_ptr[:-1][nonempty]]
    ends[nonempty] = p.iv_end[p.class_ptr[1:][nonempty] - 1] - 1
    return starts, ends


def window_peak(profile: Profile, var_idx: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Per-tile peak of live bytes of ``var_idx`` over steps ``lo..hi`` (inclusive)."""
    by_class = _class_window_peak(profile, var_idx, lo, hi)
    if by_class is not None:
        return by_class
    group = np.zeros(len(var_idx), np.int64)
    return np.asarray(group_peaks(profile, group, var_idx, np.array([lo]), np.array([hi]))[0])


#: :func:`_class_window_peak` is taken when its (class x tile) and (interval x tile) tables hold at most this
#: many cells per variable of the set.
CLASS_FACTOR = 10.0
#: Tiles per block of :func:`_class_window_peak`'s tables (bounds their memory: a few MB per block).
CLASS_TILE_BLOCK = 256


def _class_window_peak(profile: Profile, var_idx: np.ndarray, lo: int, hi: int,
                       factor: float | None = None, tile_block: int = CLASS_TILE_BLOCK) -> np.ndarray | None:
    """:func:`window_peak` summed per liveness class first; None when a set has too few variables per class.

    Every variable of a class lives at the same steps, so a large set (the
    whole program: millions of variables, a few thousand classes) needs one
    row of bytes per tile for each class, and its live bytes change only at
    the class intervals' ends: one table row per interval end, added up in
    step order, gives the live bytes after each step (ends before starts at
    a step, as in the sweep). All sums are exact in int64 (the per-class
    bincount in float64 is exact below 2**53 bytes per class and tile).
    """
    tiles = profile.tiles
    if var_idx.size == 0 or hi < lo or tiles == 0:
        return None
    v = profile.variables
    every = var_idx.size == v.count and _is_every_variable(var_idx)
    cls = v.klass if every else v.klass[var_idx]
    per_class = np.bincount(cls, minlength=profile.num_classes)
    present = np.flatnonzero(per_class)
    counts = profile.class_ptr[present + 1] - profile.class_ptr[present]
    cells = (len(present) + 2 * int(counts.sum())) * tiles
    if cells > (CLASS_FACTOR if factor is None else factor) * var_idx.size:
        return None
    rank = np.zeros(profile.num_classes, np.int64)
    rank[present] = np.arange(len(present))
    flat = rank[cls]
    flat *= tiles
    flat += v.tile if every else v.tile[var_idx]
    # Weights cast first: bincount's own cast of int64 weights is several times slower than astype.
    weights = (v.bytes if every else v.bytes[var_idx]).astype(np.float64)
    class_bytes = np.bincount(flat, weights=weights, minlength=len(present) * tiles)
    class_bytes = class_bytes.astype(np.int64).reshape(len(present), tiles)
    row, start, end, has_end = _window_intervals(profile, present, lo, hi)
    if not row.size:
        return np.zeros(tiles, np.int64)
    steps = np.concatenate((start, end[has_end])).astype(np.int64)
    rows = np.concatenate((row, row[has_end]))
    sign = np.concatenate((np.ones(len(row), np.int64), -np.ones(int(has_end.sum()), np.int64)))
    order = np.argsort(steps, kind="stable")
    steps, rows, sign = steps[order], rows[order], sign[order]
    first_at_step = np.flatnonzero(np.concatenate(([True], steps[1:] != steps[:-1])))
    peak = np.zeros(tiles, np.int64)
    for t0 in range(0, tiles, tile_block):
        block = class_bytes[:, t0:t0 + tile_block]
        change = np.add.reduceat(block[rows] * sign[:, None], first_at_step, axis=0)
        np.cumsum(change, axis=0, out=change)
        peak[t0:t0 + tile_block] = change.max(axis=0)
    return np.asarray(np.maximum(peak, 0))


def _window_intervals(profile: Profile, classes: np.ndarray, lo: int | np.ndarray,
                      hi: int | np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The liveness intervals of each entry of ``classes``, clipped to its window, that live inside it.

    The window is steps ``lo..hi``: one for all, or one per entry (arrays as
    long as ``classes``). Returns (owner: index into ``classes``, start, end,
    has_end): an end at ``hi + 1`` is never observed inside the window, so
    ``has_end`` says which ends to apply.
    """
    counts = profile.class_ptr[classes + 1] - profile.class_ptr[classes]
    owner = np.repeat(np.arange(len(classes)), counts)
    iv = expand_ranges(profile.class_ptr[classes], counts)
    lo_at = lo[owner] if isinstance(lo, np.ndarray) else lo
    hi_at = hi[owner] if isinstance(hi, np.ndarray) else hi
    start = np.maximum(profile.iv_start[iv], lo_at)
    end = np.minimum(profile.iv_end[iv], hi_at + 1)
    keep = start < end
    hi_kept = hi_at[keep] if isinstance(hi_at, np.ndarray) else hi_at
    owner, start, end = owner[keep], start[keep], end[keep]
    return owner, start, end, end <= hi_kept


def _is_every_variable(var_idx: np.ndarray) -> bool:
    """Is a set of as many indices as there are variables all of them (0, 1, ... in order)?"""
    return int(var_idx[0]) == 0 and int(var_idx[-1]) == var_idx.size - 1 and bool((np.diff(var_idx) == 1).all())


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
    # Expand each aggregate into its class's intervals, clipped to its group's window.
    rep, start, end, has_end = _window_intervals(profile, agg_cls, lo[agg_group], hi[agg_group])
    if rep.size == 0:
        return none, none, none
    g = agg_group[rep]
    t = agg_tile[rep].astype(np.int64)
    b = agg_bytes[rep]
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
