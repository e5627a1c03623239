"""Liveness classes and the ``tileMemory`` ground truth.

The ground truth is computed from the generator's own records (the pieces of
every tensor, the leaf programs as they were made), not from the document
and not with popliner's memory model, so that the model can be checked
against it; docs/synthetic-profiles.md ("Ground truth") lists each figure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.profile.tilevector import RunTable
from popliner.synth.graph import ALWAYS_LIVE, Graph, TKind
from popliner.synth.layout import Layout
from popliner.synth.lower import Lowered
from popliner.synth.tilevec import Runs

__all__ = ["OTHER_SIZES", "liveness", "other_categories", "tile_memory", "vertex_counts"]

#: Sizes of the compiler's other categories (docs/synthetic-profiles.md says which are calibrated):
#: stack bytes per tile; field data and vector-list descriptors per byte of vertex state; descriptors,
#: host exchange code and packet headers and control tables per byte of the control code of the programs
#: they follow.
OTHER_SIZES = {
    "stack": 3168,  # calibrated: Graphcore's TensorFlow docs, 3,852,288 B of stack over 1,216 tiles
    "vertexFieldData": 7934 / 12074,  # calibrated: the same docs' tile 0, 7,934 B beside 12,074 B of state
    "vectorListDescriptor": 960 / 12074,  # calibrated: the same tile, 960 B
    "copyDescriptor": 0.1,  # guessed: of the control code of Copy and DoExchange programs
    "hostExchangeCode": 2.0,  # guessed: of the control code of StreamCopy programs
    "hostExchangePacketHeader": 1.0,  # guessed (the docs' tile 0 has 1,160 B)
    "controlTable": 0.05,  # guessed: of all leaf programs' control code
}
_COPIES = ("Copy", "DoExchange")
_STREAMS = ("StreamCopyBegin", "StreamCopyMid", "StreamCopyEnd")

Interval = tuple[int, int]


def liveness(graph: Graph, ranges: Sequence[list[Interval]], steps: int) -> tuple[list[tuple[Interval, ...]],
                                                                                    np.ndarray]:
    """Liveness classes (class 0 is always-live) and the class of every tensor.

    Tensors with identical live ranges share a class.
    """
    always: tuple[Interval, ...] = ((0, steps),)
    classes: dict[tuple[Interval, ...], int] = {always: 0}
    of_tensor = np.zeros(len(graph.tensors), dtype=np.int64)
    for t in graph.tensors:
        if t.kind in ALWAYS_LIVE:
            key = always
        elif t.kind == TKind.TEMP:
            key = tuple(r for r in ranges[t.temp_of] if r[1] > r[0])
        else:
            users = [u for u in (t.producer, *t.consumers) if u >= 0 and ranges[u]]
            key = ((min(ranges[u][0][0] for u in users), max(ranges[u][-1][1] for u in users)),) if users else ()
        of_tensor[t.index] = classes.setdefault(key, len(classes))
    return list(classes), of_tensor


def tile_memory(tiles: int, layout: Layout, piece_class: np.ndarray, classes: Sequence[tuple[Interval, ...]],
                steps: int, low: Lowered, counts: np.ndarray, other: bool = False) -> dict[str, np.ndarray]:
    """Dense per-tile ground truth; keys as in the document (categories prefixed ``category.``).

    ``counts`` is :func:`vertex_counts` of ``low``; ``other`` adds :func:`other_categories`.
    """
    always = np.array([c == ((0, steps),) for c in classes], dtype=bool)
    sizes = np.array([vt.size for vt in low.vertex_types], dtype=np.int64)
    codes = np.array([vt.code for vt in low.vertex_types], dtype=np.int64)
    cats = {
        "vertexCode": ((counts > 0) * codes[:, None]).sum(axis=0),
        "vertexInstanceState": (counts * sizes[:, None]).sum(axis=0),
        "controlCode": _sum(tiles, low.control),
        "internalExchangeCode": _sum(tiles, low.exchange),
    }
    if other:
        cats.update(other_categories(tiles, low, cats["vertexInstanceState"]))
    live = always[piece_class]
    variables = np.bincount(layout.tile[live], weights=layout.nbytes[live], minlength=tiles)
    out = {"alwaysLive": np.rint(variables).astype(np.int64) + sum(cats.values()),
           "notAlwaysLivePeak": _peak(tiles, layout, piece_class, classes, ~always)}
    out.update({f"category.{k}": v.astype(np.int64) for k, v in cats.items()})
    return out


def other_categories(tiles: int, low: Lowered, state: np.ndarray) -> dict[str, np.ndarray]:
    """The categories the five components leave out, per tile, from the generator's own records.

    ``state`` is the vertex instance state per tile.
    """
    def control_of(types: tuple[str, ...] | None) -> np.ndarray:
        picked = [c for c, t in zip(low.control, low.leaf_types) if types is None or t in types]
        return _sum(tiles, picked)

    copies, streams, control = control_of(_COPIES), control_of(_STREAMS), control_of(None)
    sizes = OTHER_SIZES
    out = {
        "stack": np.full(tiles, int(sizes["stack"]), np.int64),
        "vertexFieldData": state * sizes["vertexFieldData"],
        "vectorListDescriptor": state * sizes["vectorListDescriptor"],
        "copyDescriptor": copies * sizes["copyDescriptor"],
        "hostExchangeCode": streams * sizes["hostExchangeCode"],
        "hostExchangePacketHeader": streams * sizes["hostExchangePacketHeader"],
        "controlTable": control * sizes["controlTable"],
    }
    return {k: np.rint(v).astype(np.int64) for k, v in out.items()}


def vertex_counts(tiles: int, types: int, vertex_runs: Sequence[tuple[int, Runs]]) -> np.ndarray:
    """Int [types, tiles]: instances of each vertex type on each tile, over all compute sets."""
    of_type: list[list[Runs]] = [[] for _ in range(types)]
    for vid, runs in vertex_runs:
        of_type[vid].append(runs)
    return np.array([_sum(tiles, vectors) for vectors in of_type], np.int64).reshape(types, tiles)


def _sum(tiles: int, vectors: Sequence[Runs]) -> np.ndarray:
    runs = np.asarray([r for vec in vectors for r in vec], dtype=np.int64).reshape(-1, 3)
    return RunTable(np.array([0, len(runs)]), runs[:, 0], runs[:, 1], runs[:, 2]).dense(0, tiles)


def _peak(tiles: int, layout: Layout, piece_class: np.ndarray, classes: Sequence[tuple[Interval, ...]],
          counted: np.ndarray) -> np.ndarray:
    """Per tile, the largest sum over steps of the live bytes of ``counted`` classes.

    Works on a block of tiles at a time: bytes per (class, tile), then a
    [steps + 1, tiles] difference matrix (+bytes at each interval's start,
    -bytes at its end), a running sum down the steps, and its maximum.
    Blocks keep both matrices near 128 MB whatever the profile's size.
    """
    ptr, starts, stops = _intervals(classes)
    iv_class = np.repeat(np.arange(len(classes)), np.diff(ptr))
    keep = counted[iv_class] & (stops > starts)
    iv_class, starts, stops = iv_class[keep], starts[keep], stops[keep]
    steps = int(stops.max()) if stops.size else 0
    peak = np.zeros(tiles, dtype=np.int64)
    if not iv_class.size:
        return peak
    width = int(max(1, min(tiles, (16 << 20) // max(steps + 1, len(classes)))))
    for lo in range(0, tiles, width):
        hi = min(tiles, lo + width)
        sel = (layout.tile >= lo) & (layout.tile < hi) & counted[piece_class]
        cells = np.bincount(piece_class[sel] * (hi - lo) + (layout.tile[sel] - lo), weights=layout.nbytes[sel],
                            minlength=len(classes) * (hi - lo)).reshape(len(classes), hi - lo)
        rows = cells[iv_class]
        diff = np.zeros((steps + 1, hi - lo))
        np.add.at(diff, starts, rows)
        np.add.at(diff, stops, -rows)
        np.cumsum(diff, axis=0, out=diff)
        peak[lo:hi] = np.rint(diff.max(axis=0)).astype(np.int64)
    return np.maximum(peak, 0)


def _intervals(classes: Sequence[tuple[Interval, ...]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lens = np.array([len(c) for c in classes], dtype=np.int64)
    ptr = np.zeros(len(classes) + 1, dtype=np.int64)
    np.cumsum(lens, out=ptr[1:])
    flat = np.array([iv for c in classes for iv in c], dtype=np.int64).reshape(-1, 2)
    return ptr, flat[:, 0], flat[:, 1]
