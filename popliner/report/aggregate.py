"""Aggregation that keeps big profiles readable and the report light.

Two reductions, shared by the PNG plots and the HTML report: :func:`tile_grid`
(a heatmap grid, one cell per tile) and :func:`max_pool` (a series cut to at
most ``points`` buckets, each keeping its maximum and where it is). Why these
keep what matters: docs/report.md ('Staying light at full size').
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Pooled", "grid_values", "max_pool", "tile_grid"]


def tile_grid(tiles: int) -> tuple[int, int]:
    """(rows, columns) for ``tiles`` cells, about 1.5 times wider than tall.

    An exact factorisation is used when one is close (1472 = 32 x 46);
    otherwise the last row is left partly empty.
    """
    if tiles <= 0:
        return 1, 1
    ideal = math.sqrt(1.5 * tiles)
    for cols in sorted(range(1, tiles + 1), key=lambda c: abs(c - ideal)):
        if abs(cols - ideal) > 0.25 * ideal:
            break
        if tiles % cols == 0:
            return tiles // cols, cols
    cols = max(1, round(ideal))
    return math.ceil(tiles / cols), cols


def grid_values(per_tile: np.ndarray) -> np.ndarray:
    """Per-tile values as a float (rows, cols) array in row-major tile order; NaN pads the last row."""
    values = np.asarray(per_tile, dtype=float)
    rows, cols = tile_grid(len(values))
    out = np.full(rows * cols, np.nan)
    out[: len(values)] = values
    return out.reshape(rows, cols)


@dataclass(frozen=True, eq=False)
class Pooled:
    """A series reduced to buckets: ``x[k]`` is where bucket k's maximum ``y[k]`` is."""

    x: np.ndarray  # int64 original index of each bucket's maximum
    y: np.ndarray  # the maximum of each bucket
    bucket: int  # original points per bucket (1 = not reduced)


def max_pool(values: np.ndarray, points: int, *, offset: int = 0) -> Pooled:
    """At most ``points`` buckets of consecutive values, each kept as its maximum.

    ``offset`` is added to the positions (e.g. the first step of a window).
    The overall maximum is always kept, at its own position.
    """
    values = np.asarray(values)
    n = len(values)
    if n <= points or points < 1:
        return Pooled(np.arange(n, dtype=np.int64) + offset, values.copy(), 1)
    bucket = math.ceil(n / points)
    pad = (-n) % bucket
    low = values.min() if n else 0
    padded = np.concatenate((values, np.full(pad, low, dtype=values.dtype))).reshape(-1, bucket)
    where = np.argmax(padded, axis=1)
    x = np.arange(len(padded), dtype=np.int64) * bucket + where
    return Pooled(x + offset, padded[np.arange(len(padded)), where], bucket)
