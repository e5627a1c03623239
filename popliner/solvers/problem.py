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

from popliner.memory.ranges import Front, front_memory

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
    #: Objectives to minimise ahead of the default order (names in popliner.solvers.objective.OBJECTIVES).
    objectives: tuple[str, ...] = ()
    #: The IPUs the user asked for, when the solve runs over fewer (one per layer at most, or the fewest that
    #: fit); 0: ``num_ipus``. Results report it as asked.
    asked_ipus: int = 0

    @property
    def requested(self) -> int:
        """The IPUs the user asked for (what a result reports as requested)."""
        return self.asked_ipus or self.num_ipus

    @property
    def stage_counts(self) -> range:
        """The stage counts a split may have: exactly ``num_ipus`` with ``exact_ipus``, else 1 to ``num_ipus``."""
        return range(self.num_ipus, self.num_ipus + 1) if self.exact_ipus else range(1, self.num_ipus + 1)

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
        return front_memory(self.front(i, j), extra_stash, self._limit)

    def front(self, i: int, j: int) -> Front:
        """One tile: the range's figure and its stash entry (() over the limit)."""
        peak = max(self._peak[i : j + 1])
        base = sum(self._base[i : j + 1])
        if self._head is not None and i == 0:
            base += self._head[0]
            peak = max(peak, self._head[1])
        return ((peak + base, sum(self._stash[i : j + 1])),) if peak + base <= self._limit else ()

    def compute(self, i: int, j: int) -> int:
        head = self._head[2] if self._head is not None and i == 0 else 0
        return sum(self._cycles[i : j + 1]) + head

    def crossing(self, j: int) -> int:
        return self._cross[j] if 0 <= j < len(self._cross) and (j < self.num_layers - 1 or self.head_wraps) else 0

    def transfer(self, nbytes: int) -> int:
        return math.ceil(nbytes / self._bpc)

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        return frozenset()
