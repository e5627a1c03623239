"""Lowered variables: every tensor cut into per-tile pieces, all in numpy.

How many pieces a tensor gets, on which tiles and of which sizes, is
docs/synthetic-profiles.md's "Variables". Piece ``j`` of a tensor has id
``first_id + j``, so a program's variable list is a few contiguous id ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from popliner.errors import UsageProblem
from popliner.synth.graph import Tensor

__all__ = ["MAX_PIECES", "Layout", "lay_out"]

#: Refuse to generate more lowered variables than this (about 2 GB of arrays).
MAX_PIECES = 60_000_000


@dataclass(frozen=True, eq=False)
class Layout:
    first_id: np.ndarray  # int64 [tensors]: id of the tensor's first piece
    count: np.ndarray  # int64 [tensors]: pieces of the tensor
    tensor: np.ndarray  # int32 [pieces]: owning tensor
    tile: np.ndarray  # int64 [pieces]
    nbytes: np.ndarray  # int64 [pieces]

    @property
    def pieces(self) -> int:
        return int(self.tile.size)

    def ids(self, tensors: Sequence[int]) -> np.ndarray:
        """Variable ids of all pieces of ``tensors``."""
        if not tensors:
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(self.first_id[t], self.first_id[t] + self.count[t]) for t in tensors])


def lay_out(tensors: Sequence[Tensor], tiles: int, scale: float, bytes_per_tile: int) -> Layout:
    nbytes = np.fromiter((t.nbytes for t in tensors), dtype=np.int64, count=len(tensors))
    start = np.fromiter((t.start for t in tensors), dtype=np.int64, count=len(tensors))
    span = np.fromiter((t.count for t in tensors), dtype=np.int64, count=len(tensors))
    # Below scale 1 a tensor covers only part of its span, but a big one still
    # spreads over enough tiles that no piece exceeds 1/16 of a tile's memory:
    # otherwise one embedding table would pile up on a few tiles.
    need = np.minimum(span, -(-nbytes // max(1, bytes_per_tile // 16)))
    count = np.maximum(np.rint(span * scale).astype(np.int64), need)
    count = np.clip(count, 1, np.maximum(1, nbytes // 2))
    total = int(count.sum())
    if total > MAX_PIECES:
        raise UsageProblem(f"this spec would make {total:,} lowered variables (limit {MAX_PIECES:,}); "
                           "lower --scale or the model size")
    first_id = np.zeros(len(tensors), dtype=np.int64)
    np.cumsum(count[:-1], out=first_id[1:])
    owner = np.repeat(np.arange(len(tensors), dtype=np.int32), count)
    j = np.arange(total, dtype=np.int64) - first_id[owner]
    n, c = count[owner], span[owner]
    piece = _split_bytes(nbytes[owner], j, n)
    tile = (start[owner] + (j * c) // n) % tiles
    _balance(tile, piece, first_id, count, span, tiles)
    return Layout(first_id, count, owner, tile, piece)


def _balance(tile: np.ndarray, piece: np.ndarray, first_id: np.ndarray, count: np.ndarray, span: np.ndarray,
             tiles: int) -> None:
    """Shift each thinned-out tensor (fewer pieces than tiles) onto the emptiest of its candidate tile sets.

    A tensor using every k-th tile of its span can start at any of k
    offsets; taking, tensor after tensor, the offset whose tiles hold the
    fewest bytes so far keeps per-tile totals even, as they are at scale 1.
    Changes ``tile`` in place.
    """
    thin = np.flatnonzero(count < span)
    if not thin.size:
        return
    owner_thin = np.zeros(len(count), dtype=bool)
    owner_thin[thin] = True
    dense = ~np.repeat(owner_thin, count)
    load = np.bincount(tile[dense], weights=piece[dense], minlength=tiles)
    for t in thin.tolist():
        a, b = int(first_id[t]), int(first_id[t] + count[t])
        base, nbytes = tile[a:b], piece[a:b]
        choices = min(8, int(span[t] // count[t]))
        costs = [float(load[(base + o) % tiles] @ nbytes) for o in range(choices)]
        best = (base + int(np.argmin(costs))) % tiles
        tile[a:b] = best
        load[best] += nbytes


def _split_bytes(b: np.ndarray, j: np.ndarray, n: np.ndarray) -> np.ndarray:
    """Bytes of piece ``j`` of ``n`` of a ``b``-byte tensor (exact integer split).

    Weights 5 for the first quarter of the pieces and 4 for the rest; the
    piece gets the difference of consecutive cumulative shares, so the
    pieces of a tensor add up to exactly ``b``.
    """
    hot = (n + 3) // 4
    total = 5 * hot + 4 * (n - hot)

    def upto(k: np.ndarray) -> np.ndarray:  # cumulative weight of pieces [0, k)
        out: np.ndarray = 5 * np.minimum(k, hot) + 4 * np.maximum(k - hot, 0)
        return out

    piece: np.ndarray = (b * upto(j + 1)) // total - (b * upto(j)) // total
    return piece
