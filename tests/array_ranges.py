"""A range table from explicit numbers, for the solvers' tests (a :class:`popliner.pipeline.RangeCosts`)."""

from __future__ import annotations

import math
from collections.abc import Sequence

#: A range that does not fit.
OVERFLOW = math.inf


class ArrayRanges:
    """A range table from explicit numbers.

    Range memory is ``max(peak[i..j]) + sum(base[i..j])`` plus ``extra_stash``
    times ``sum(stash[i..j])``, a sub-additive shape like the real model's.
    ``tiles`` spreads copy buffers (0, the default: none); ``has_unlayered``
    says whether an unlayered group goes with the first range. ``head``
    (``base``, ``peak``, ``cycles``) is a head wrapped onto IPU 0: it joins
    the range at position 0, which then also receives ``crossing[-1]``, the
    bytes the head takes from the last layer (``crossing`` then has one entry
    per layer).
    """

    def __init__(self, base: Sequence[int], peak: Sequence[int], cycles: Sequence[int],
                 crossing: Sequence[int], stash: Sequence[int] | None = None, limit: float = OVERFLOW,
                 bytes_per_cycle: float = 1.0, *, tiles: int = 0, has_unlayered: bool = False,
                 head: tuple[int, int, int] | None = None) -> None:
        self._base = list(base)
        self._peak = list(peak)
        self._cycles = list(cycles)
        self._cross = list(crossing)
        self._stash = list(stash) if stash is not None else [0] * len(self._base)
        self._limit = limit
        self._bpc = bytes_per_cycle
        self._tiles = tiles
        self._unlayered = has_unlayered
        self._head = head

    @property
    def num_layers(self) -> int:
        return len(self._base)

    @property
    def layer_names(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(self.num_layers))

    @property
    def has_cycles(self) -> bool:
        return any(self._cycles)

    @property
    def has_unlayered(self) -> bool:
        return self._unlayered

    @property
    def limit(self) -> float:
        return self._limit

    @property
    def tiles(self) -> int:
        return self._tiles

    @property
    def head_wraps(self) -> bool:
        return self._head is not None

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        peak = max(self._peak[i : j + 1])
        base = sum(self._base[i : j + 1])
        if self._head is not None and i == 0:
            base += self._head[0]
            peak = max(peak, self._head[1])
        value = peak + base + extra_stash * sum(self._stash[i : j + 1])
        return value if value <= self._limit else OVERFLOW

    def compute(self, i: int, j: int) -> int:
        head = self._head[2] if self._head is not None and i == 0 else 0
        return sum(self._cycles[i : j + 1]) + head

    def crossing(self, j: int) -> int:
        return self._cross[j] if 0 <= j < len(self._cross) and (j < self.num_layers - 1 or self.head_wraps) else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bpc)

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        return frozenset()
