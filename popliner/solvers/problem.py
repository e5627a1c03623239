"""What a solver is given: the problem (IPUs, budget, constraints) and range costs, as plain data.

Solvers read range costs through :class:`popliner.pipeline.RangeCosts`: a
profile's :class:`popliner.memory.ranges.ProfileRanges` (the tests build
tables from explicit numbers: tests/array_ranges.py).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Bounds", "SplitProblem"]

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
