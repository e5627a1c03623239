"""PopLiner's greedy split, kept for parity.

For a minimum of 3, then 2, then 1 layers per stage, and a memory cap of
50%, 60%, ... 100% of the per-tile budget: fill IPU 0 with layers until the
next one would go over the cap, then IPU 1, and so on. The first (minimum,
cap) pair that places every layer on at most N IPUs wins. Low caps come
first, so the winner spreads memory as evenly as the greedy rule can; it may
use fewer IPUs than asked.

Two rules of the original bend that minimum. PopLiner's layer list starts
with the group of operations without a layer, so on the first stage that
group counts as one of the minimum's layers. And a stage that starts with
fewer layers left than the minimum may hold any number of them (at least
one). The user's ``--min-layers-per-stage`` is not bent: it is a constraint
every solver honours alike.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from popliner.pipeline import RangeCosts, extra_stash_entries, spread_over_tiles
from popliner.solvers.dp import copy_buffers
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["CAPS", "MIN_LAYERS", "greedy_bounds", "layers_needed"]

MIN_LAYERS = (3, 2, 1)
CAPS = (0.5, 0.6, 0.7, 0.8, 0.9, 1.0)


def greedy_bounds(table: RangeCosts, problem: SplitProblem) -> tuple[Bounds, float, int] | None:
    """Stages as ``(first, last)`` layer pairs, with the cap and minimum that won.

    Constraints the greedy rule cannot express (pins, same-IPU pairs) are
    honoured by refusing a split where it is not allowed: the stage then
    keeps growing, and the attempt fails if that overflows.
    """
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    copies = copy_buffers(table, problem.training)  # each range's, once for every fill
    for min_layers in MIN_LAYERS:
        fills = _Fills(table, problem, min_layers, forbidden, copies)
        caps = [int(cap * problem.budget) for cap in CAPS]
        for share, cap, after in zip(CAPS, caps, [*caps[1:], None]):
            bounds = fills.first_fit(cap, after)
            if bounds is not None:
                return bounds, share, max(min_layers, problem.min_layers)
    return None


def layers_needed(table: RangeCosts, problem: SplitProblem, start: int, min_layers: int) -> int:
    """Layers (with a name) the stage starting at layer ``start`` must hold under greedy minimum ``min_layers``.

    On the first stage the unlayered group, when there is one, counts as a
    layer; with fewer layers left than the minimum, one is enough. The
    user's minimum applies as it is (capped by the number of layers, as
    a single stage cannot hold more).
    """
    group = 1 if start == 0 and table.has_unlayered else 0
    left = table.num_layers - start + group
    greedy = max(min_layers - group, 1) if left >= min_layers else 1
    return max(greedy, min(problem.min_layers, table.num_layers))


@dataclass(frozen=True)
class _Fill:
    """One fill: its stages if it placed every layer; else whether it ran out of planned stages, and how far it got."""

    bounds: Bounds | None
    ran_out: bool = False
    placed: Bounds = ()  # the stages placed when it ran out

    @property
    def reach(self) -> int:
        """Layers placed."""
        return self.placed[-1][1] + 1 if self.placed else 0


class _Fills:
    """The fills of one greedy minimum, each (cap, planned stages) filled at most once.

    In training the stash depth of IPU k depends on how many IPUs the
    pipeline has, so each cap plans for K = 1, 2, ... IPUs and keeps the
    first plan that needs no more than K (with fewer stages than planned the
    real stashes are only smaller, so it still fits). Which plan is first is
    settled with fewer fills than trying each K in turn, the answer unchanged:

    * A plan fails at its first stage for every K past the deepest whose
      first stage holds its minimum, as stash entries only grow with K.
    * A plan of K stages that runs out of stages at a cap at least
      :attr:`slack` higher rules out plans of at most K stages at the cap,
      as far as their first stages end no later than their partners': see
      :meth:`_held_back`.
    """

    def __init__(self, table: RangeCosts, problem: SplitProblem, min_layers: int, forbidden: frozenset[int],
                 copies: Callable[[int, int], int]) -> None:
        self.table, self.problem, self.min_layers, self.forbidden, self.copies = (
            table, problem, min_layers, forbidden, copies)
        #: Per tile, the most a range's copy buffers grow when it starts later (not at the first layer).
        self.slack = _most_rise(table)
        self.fills: dict[tuple[int, int], _Fill] = {}

    def first_fit(self, cap: int, after: int | None = None) -> Bounds | None:
        """The first plan at ``cap`` that places every layer (None: none does); ``after``: the next cap tried."""
        if not self.problem.training:
            return self.fill(cap, self.problem.num_ipus).bounds
        top = self._deepest(cap)
        known = self._ruled_out(cap)  # every plan of at most ``known`` stages fails at the cap
        guessing = True
        while known < top:
            # The fewest stages known to place every layer at the cap: the answer is at most that.
            ceiling = min((k for (c, k), f in self.fills.items() if c == cap and k > known and f.bounds is not None),
                          default=top + 1)
            if ceiling == known + 1:
                return self.fills[(cap, ceiling)].bounds
            guess = min(self._guess(cap, known, top) if guessing else known + 1, ceiling)
            probes = []
            if guess > top and after is not None:
                # The cap looks hopeless: a fill of the next cap settles it, as deep as that cap looks to
                # need (so that it serves the next cap's search too), else as deep as this cap goes.
                deeper = self._guess(after, top, self.problem.num_ipus, near=cap) - 1
                probes += [(after, deeper), (after, top)] if deeper > top else [(after, top)]
            if guess > known + 1:
                probes.append((cap + self.slack, min(guess, top + 1) - 1))
            probes = [(c, k) for c, k in probes if k > known and self._rules_out(c, cap)]
            ruled = next((held for held in (self._ruling(c, k, cap) for c, k in probes) if held > known), None)
            if ruled is not None:
                known = ruled
                continue
            if any(self.fills[(c, k)].bounds is not None and c == cap for c, k in probes):
                continue  # a probe placed every layer at the cap: a lower ceiling, a new guess
            # A probe that did neither was read in vain: from here on, each plan in turn.
            guessing = guessing and not probes
            found = self.fill(cap, known + 1)
            if found.bounds is not None:
                return found.bounds
            known += 1
        return None

    def _rules_out(self, higher: int, cap: int) -> bool:
        """May a fill that runs out at ``higher`` rule out plans at ``cap`` (:meth:`_held_back` says which)?"""
        return cap + self.slack <= min(higher, self.table.limit)

    def _held_back(self, fill: _Fill, cap: int) -> int:
        """The most stages K' such that no plan of K' stages or fewer at ``cap`` places every layer.

        ``fill``, of K stages, ran out at a cap that :meth:`_rules_out` allows.
        Set a plan of K' <= K stages at ``cap`` beside the last K' stages of
        ``fill``: each stage has the same stash entries as its partner (as
        many stages come after both). If the plan's first stage ends no
        later than its partner, every later stage of the plan starts no
        later than its partner, and so ends no later: the partner's range
        lies in the stage's, so its memory is no larger, its copy buffers
        exceed the stage's by at most :attr:`slack` (neither starts at the
        first layer), and a pin or a forbidden split in it is in the
        stage's too. So the plan runs out as well, or fails sooner.
        """
        stages = len(fill.placed)
        for shallower in range(1, stages + 1):
            first = self._first_length(cap, shallower)
            if first > fill.placed[stages - shallower][1] + 1:
                return shallower - 1
        return stages

    def _ruling(self, higher: int, stages: int, cap: int) -> int:
        """The most stages of a plan at ``cap`` ruled out by the fill of ``stages`` at ``higher`` (0: none)."""
        fill = self.fill(higher, stages)
        return self._held_back(fill, cap) if fill.ran_out else 0

    def _ruled_out(self, cap: int) -> int:
        """The most stages of a plan at ``cap`` that fills already run out rule out."""
        return max((self._held_back(f, cap) for (c, _), f in self.fills.items()
                    if f.ran_out and self._rules_out(c, cap)), default=0)

    def fill(self, cap: int, stages: int) -> _Fill:
        key = (cap, stages)
        found = self.fills.get(key)
        if found is None:
            found = self.fills[key] = _fill_for(self.table, self.problem, cap, self.min_layers, self.forbidden,
                                                stages, self.copies)
        return found

    def _first_stage_holds(self, cap: int, stages: int) -> bool:
        return self._first_length(cap, stages) >= layers_needed(self.table, self.problem, 0, self.min_layers)

    def _deepest(self, cap: int) -> int:
        """The most planned stages whose first stage holds its minimum at ``cap`` (0: none)."""
        lo, hi = 0, self.problem.num_ipus  # holds at lo (0 trivially); the answer is in lo..hi
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self._first_stage_holds(cap, mid):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def _guess(self, cap: int, known: int, top: int, near: int | None = None) -> int:
        """How many stages the cap's first plan may need (more than ``top``: it looks hopeless).

        Only a guess, to choose which fills to read; the answer never depends
        on it. Take the deepest plan known to run out near the cap (``near``,
        else the cap itself) and the start of its last stage: the stage a
        plan puts r stages from the end is taken as long as the stage from
        that start with r - 1 stages after it (the row is read already, or
        a little further at a higher cap). With the first stage's length
        from the first layer, that gives each plan's reach.
        """
        near = cap if near is None else near
        runs = [(k, f) for (c, k), f in self.fills.items()
                if near <= c <= near + self.slack and f.ran_out and k >= 2]
        if not runs:
            return known + 1
        _, fill = max(runs, key=lambda r: (r[0], r[1].reach))
        start = fill.placed[-1][0]
        n = self.table.num_layers
        behind = 0  # layers placed by the stages after the first
        for planned in range(1, top + 1):
            if planned > 1:  # one more stage after the first, with planned - 2 stages after it
                end = _furthest_fit(self.table, self.problem, start, cap, 1, planned, self.forbidden, self.copies)
                behind += 0 if end is None else end - start + 1
            if planned > known and self._first_length(cap, planned) + behind >= n:
                return planned
        return top + 1

    def _first_length(self, cap: int, stages: int) -> int:
        """Layers of a plan's first stage (0: none fits), read from the first layer's row."""
        end = _furthest_fit(self.table, self.problem, 0, cap, 0, stages, self.forbidden, self.copies)
        return 0 if end is None else end + 1


def _fill_for(table: RangeCosts, problem: SplitProblem, cap: int, min_layers: int,
              forbidden: frozenset[int], stages: int, copies: Callable[[int, int], int]) -> _Fill:
    """Fill IPUs in order, planning stashes for ``stages`` IPUs."""
    n = table.num_layers
    bounds: list[tuple[int, int]] = []
    start = 0
    while start < n:
        k = len(bounds)
        if k >= stages:
            return _Fill(None, ran_out=True, placed=tuple(bounds))
        end = _furthest_fit(table, problem, start, cap, k, stages, forbidden, copies)
        if end is None or end - start + 1 < layers_needed(table, problem, start, min_layers):
            return _Fill(None)
        bounds.append((start, end))
        start = end + 1
    if problem.exact_ipus and len(bounds) != problem.num_ipus:
        return _Fill(None)
    return _Fill(tuple(bounds))


def _most_rise(table: RangeCosts) -> int:
    """The most a range's copy buffers grow when it starts later (neither start the first layer).

    A range from layer ``i >= 1`` receives what crosses after layer
    ``i - 1``; per tile, the buffers of a later start exceed those of an
    earlier one by at most the largest rise of that, spread over the tiles.
    """
    received = [table.crossing(j) for j in range(table.num_layers - 1)]
    rise, low = 0, math.inf
    for nbytes in received:
        low = min(low, nbytes)
        rise = max(rise, int(nbytes - low))
    return spread_over_tiles(rise, table.tiles)


def _furthest_fit(table: RangeCosts, problem: SplitProblem, start: int, cap: int, position: int, stages: int,
                  forbidden: frozenset[int], copies: Callable[[int, int], int]) -> int | None:
    """Last layer of the longest allowed range from ``start`` within ``cap`` at ``position`` of ``stages``."""
    best = None
    # position_memory's figure, its stash entries taken once: over the cap, or over the table's limit (inf).
    extra = extra_stash_entries(position, stages, table.head_wraps) if problem.training else 0
    limit = table.limit
    for j in range(start, table.num_layers):
        base = table.memory(start, j, extra)
        if base == math.inf:
            break
        total = base + copies(start, j)
        if total > limit or total > cap:
            break
        pinned = any(start <= p < j for p in problem.split_after)
        if pinned:
            break  # a pinned split inside the range: the stage must end there
        if j == table.num_layers - 1 or problem.allowed_split(j, forbidden):
            best = j
        if j in problem.split_after:
            break
    return best
