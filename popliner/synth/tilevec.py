"""Per-tile vectors while generating, and their TileVector encoding.

While generating, a per-tile vector is a short Python list of runs
``(first, stop, value)`` (sorted, non-overlapping, value > 0): most vectors
of a program are one or two runs, and plain tuples are much cheaper than
numpy arrays at that size. Sums of vectors (a Sequence's cycles) go through
a difference map of their edges; the ground truth's sums, numpy difference arrays.

:func:`encode_runs` writes a vector in its shortest TileVector form
(docs/synthetic-profiles.md, "TileVectors"); a zero vector is left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np

from popliner.profile.tilevector import value_runs

__all__ = ["Runs", "dense_to_runs", "encode_dense", "encode_runs", "span_runs", "stride_runs",
           "sum_runs"]

Runs = list[tuple[int, int, int]]


def span_runs(start: int, count: int, tiles: int, value: int) -> Runs:
    """``value`` on ``count`` tiles from ``start``, wrapping past the last tile."""
    if value <= 0 or count <= 0:
        return []
    count = min(count, tiles)
    start %= tiles
    end = start + count
    if end <= tiles:
        return [(start, end, value)]
    return [(0, end - tiles, value), (start, tiles, value)]


def stride_runs(start: int, count: int, tiles: int, value: int, stride: int) -> Runs:
    """``value`` on every ``stride``-th tile of a span (one-tile runs, sorted)."""
    if value <= 0 or count <= 0:
        return []
    picked = sorted({(start + k) % tiles for k in range(0, min(count, tiles), stride)})
    return [(t, t + 1, value) for t in picked]


def sum_runs(parts: Iterable[tuple[Runs, int]]) -> Runs:
    """Sum of vectors, each multiplied by its integer weight."""
    edges: dict[int, int] = {}
    for runs, weight in parts:
        for f, s, v in runs:
            edges[f] = edges.get(f, 0) + v * weight
            edges[s] = edges.get(s, 0) - v * weight
    out: Runs = []
    level = 0
    keys = sorted(edges)
    for here, nxt in itertools.pairwise(keys):
        level += edges[here]
        if level:
            if out and out[-1][1] == here and out[-1][2] == level:
                out[-1] = (out[-1][0], nxt, level)
            else:
                out.append((here, nxt, level))
    return out


def dense_to_runs(dense: np.ndarray) -> Runs:
    """Maximal runs of equal non-zero values."""
    return list(zip(*(column.tolist() for column in value_runs(dense))))


def encode_runs(runs: Runs, tiles: int) -> Any | None:
    """The shortest TileVector form of ``runs``; None for all zeros."""
    if not runs:
        return None
    covered = sum(s - f for f, s, _ in runs)
    runs_cost, sparse_cost = 3 * len(runs), 2 * covered
    if runs_cost <= sparse_cost and runs_cost <= tiles:
        return {"runs": [[f, s, v] for f, s, v in runs]}
    if sparse_cost <= tiles:
        return {"sparse": [[t, v] for f, s, v in runs for t in range(f, s)]}
    dense = [0] * tiles
    for f, s, v in runs:
        dense[f:s] = [v] * (s - f)
    return dense


def encode_dense(dense: np.ndarray) -> Any | None:
    """Like :func:`encode_runs` for a numpy vector; a dense one stays a numpy array (orjson writes it)."""
    runs = dense_to_runs(dense)
    if 3 * len(runs) > dense.size and 2 * int(np.count_nonzero(dense)) > dense.size:
        return np.ascontiguousarray(dense, dtype=np.int64)
    return encode_runs(runs, int(dense.size))
