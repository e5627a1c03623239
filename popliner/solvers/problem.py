"""What a solver is given: the problem (IPUs, budget, constraints) and range costs, as plain data.

Solvers read range costs through :class:`popliner.pipeline.RangeCosts`: a
profile's :class:`popliner.memory.ranges.ProfileRanges`, or
:class:`ArrayRanges` built from explicit numbers, in the way torchgpipe's
``balance`` takes plain per-layer figures.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["OVERFLOW", "ArrayRanges", "Bounds", "SplitProblem"]

#: A range that does not fit.
OVERFLOW = math.inf
#: A split: each stage's (first, last) layer index, in order.
Bounds = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class SplitProblem:
    """What the user asked for: IPUs, budget and constraints (layer indices)."""

    num_ipus: int
    budget: int  # bytes per tile a stage may use (headroom already taken off)
    exact_ipus: bool = False
    min_layers: int = 1
    split_after: tuple[int, ...] = ()
    same_ipu: tuple[tuple[int, int], ...] = ()
    keep_shared_together: bool = False
    training: bool = False

    def allowed_split(self, j: int, forbidden: frozenset[int]) -> bool:
        """May a stage end after layer ``j`` (with more layers after it)?"""
        if j in forbidden:
            return False
        return all(not (min(a, b) <= j < max(a, b)) for a, b in self.same_ipu)


class ArrayRanges:
    """A range table from explicit numbers (tests, properties, what-if studies).

    Range memory is ``max(peak[i..j]) + sum(base[i..j])`` plus ``extra_stash``
    times ``sum(stash[i..j])``, a sub-additive shape like the real model's.
    ``tiles`` spreads copy buffers (0, the default: none); ``has_unlayered``
    says whether an unlayered group goes with the first range.
    """

    def __init__(self, base: Sequence[int], peak: Sequence[int], cycles: Sequence[int],
                 crossing: Sequence[int], stash: Sequence[int] | None = None, limit: float = OVERFLOW,
                 bytes_per_cycle: float = 1.0, *, tiles: int = 0, has_unlayered: bool = False) -> None:
        self._base = list(base)
        self._peak = list(peak)
        self._cycles = list(cycles)
        self._cross = list(crossing)
        self._stash = list(stash) if stash is not None else [0] * len(self._base)
        self._limit = limit
        self._bpc = bytes_per_cycle
        self._tiles = tiles
        self._unlayered = has_unlayered

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

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        value = max(self._peak[i : j + 1]) + sum(self._base[i : j + 1]) + extra_stash * sum(self._stash[i : j + 1])
        return value if value <= self._limit else OVERFLOW

    def compute(self, i: int, j: int) -> int:
        return sum(self._cycles[i : j + 1])

    def crossing(self, j: int) -> int:
        return self._cross[j] if 0 <= j < self.num_layers - 1 else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bpc)

    def cost(self, i: int, j: int) -> int:
        return self.compute(i, j) + (self.transfer(self.crossing(i - 1)) if i > 0 else 0)

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        return frozenset()
