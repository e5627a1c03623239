"""The smallest worst-tile memory of a split, reading only the ranges that can matter: a DP over suffixes.

In training a stage's stash depth depends only on how many stages there
are from it to the end (``r``: ``2(r-1)+1`` entries, ``2r+1`` with a
wrapped head), not on the pipeline's length. So ``best[r][i]``, the
smallest largest memory of layers ``i..n-1`` in exactly ``r`` stages,
serves every stage count at once: a split into ``K`` stages is
``best[K][0]``. The table is filled from the last layer backwards, one row
of the range table (ranges ``i..j``, growing ``j``) at a time, so a lazy
:class:`popliner.memory.ranges.ProfileRanges` evaluates each row once and
only as far as it is read.

Only ranges at or under ``bound`` are read: a row stops at the first range
over it, and a range holding one known to be over it (same or fewer stash
entries) is not read at all. With ``bound`` at least the optimum, the
values at or under it are exact.

:func:`forward_bounds` then picks, for the chosen stage count, the split
:func:`popliner.solvers.dp.dp_for_stages` would (the same tie-breaking), from
the ranges this pass kept; see docs/solvers.md for why it is the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from popliner.deadline import check_deadline
from popliner.pipeline import (
    RangeCosts,
    copy_buffer_per_tile,
    extra_stash_entries,
    position_memory,
    range_boundaries,
)
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["SuffixTable", "estimated_split", "forward_bounds", "slot", "suffix_table"]

_INF = math.inf


def slot(i: int, stages_left: int) -> tuple[int, int]:
    """A (position, stage count) with ``stages_left`` stages from it to the end; position 0 only for layer 0."""
    return (0, stages_left) if i == 0 else (1, stages_left + 1)


@dataclass
class SuffixTable:
    """``best[r][i]`` (``inf`` over the bound) and the ranges kept: ``edges[(r, i)]`` = [(j, worst-tile bytes)]."""

    bound: float
    best: list[list[float]]
    edges: dict[tuple[int, int], list[tuple[int, float]]] = field(default_factory=dict)

    def whole(self, stages: int) -> float:
        """The smallest largest memory of a split into exactly ``stages`` stages (``inf`` over the bound)."""
        return self.best[stages][0] if stages < len(self.best) else _INF


def suffix_table(table: RangeCosts, problem: SplitProblem, bound: float, max_stages: int,
                 deadline: float | None = None) -> SuffixTable:
    """``best[r][i]`` for ``r <= max_stages``, rows ``n-1`` down to ``0`` (:class:`OutOfTime` past ``deadline``)."""
    n = table.num_layers
    rows = min(max_stages, n)
    best = [[_INF] * (n + 1) for _ in range(rows + 1)]
    best[0][n] = -_INF  # nothing left to place
    out = SuffixTable(bound, best)
    lowest = [n + 1] * (rows + 1)  # per r: the smallest i with best[r][i] finite so far
    lowest[0] = n
    over: dict[int, int] = {}  # stash entries -> smallest last layer of a range over the bound (its start >= i)
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    end_ok = [j == n - 1 or problem.allowed_split(j, forbidden) for j in range(n)]
    pin = n - 1  # the first pinned split at or after i: no stage from i goes past it
    for i in range(n - 1, -1, -1):
        check_deadline(deadline)
        if i in problem.split_after and i < n - 1:
            pin = i
        stop = n  # ends at or past it are over the bound (a known range over it lies inside)
        known_over = sorted(over.items())  # by stash entries: a row's stages left, and so its entries, only grow
        taken = 0
        for r in range(1, min(rows, n - i) + 1):
            if i > 0 and r == max_stages:
                break  # a stage after the first leaves room for at least one before it
            if lowest[r - 1] > n:
                continue  # no r-1 stages fit after any end: none from here either
            position, count = slot(i, r)
            extra = extra_stash_entries(position, count, table.head_wraps) if problem.training else 0
            # Ranges over the bound with at most this many stash entries bound this one too.
            while taken < len(known_over) and known_over[taken][0] <= extra:
                stop = min(stop, known_over[taken][1])
                taken += 1
            first = max(i + problem.min_layers - 1, lowest[r - 1] - 1)
            last = min(pin, stop - 1, n - 1 if r == 1 else n - 2)
            if r == 1:
                first = max(first, n - 1)
            kept: list[tuple[int, float]] = []
            value = _INF
            for j in range(first, last + 1):
                after = best[r - 1][j + 1]
                if after == _INF or not end_ok[j]:
                    continue
                if table.memory(i, j, extra) > bound:
                    # Memory only grows with the range: every longer one from here, and every
                    # range holding this one with as many stash entries or more, is over too.
                    over[extra] = min(over.get(extra, n), j)
                    stop = min(stop, j)
                    break
                memory = position_memory(table, i, j, position, count, problem.training)
                if memory > bound:
                    continue  # its copy buffers take it over; a longer range may still fit
                kept.append((j, memory))
                value = min(value, max(memory, after))
            if kept:
                out.edges[(r, i)] = kept
            if value < _INF:
                best[r][i] = value
                lowest[r] = min(lowest[r], i)
    return out


def forward_bounds(suffixes: SuffixTable, stages: int, value: float, n: int) -> Bounds:
    """The split into ``stages`` stages of largest memory ``value`` that the forward DP would pick.

    :func:`popliner.solvers.dp.dp_for_stages` keeps, for each stage ending
    at ``j``, the latest start among those of smallest value; here the same
    choice is made over the states from which the rest of the layers still
    fit in ``value`` (every state on an optimal split is one of them).
    """
    best = suffixes.best
    reached: dict[int, tuple[float, int]] = {-1: (-_INF, -1)}  # end of the previous stage -> (value, start)
    back: list[dict[int, tuple[float, int]]] = []
    for k in range(stages):
        r = stages - k
        here: dict[int, tuple[float, int]] = {}
        for end in sorted(reached):
            i = end + 1
            prev = reached[end][0]
            for j, memory in suffixes.edges.get((r, i), ()):
                if best[r - 1][j + 1] > value:
                    continue  # the rest does not fit within the optimum
                v = max(prev, memory)
                if v > value:
                    continue
                known = here.get(j)
                if known is None or v < known[0] or (v == known[0] and i > known[1]):
                    here[j] = (v, i)
        back.append(here)
        reached = here
    if n - 1 not in reached:
        return ()  # pragma: no cover - only called with a value the suffix table reached
    bounds: list[tuple[int, int]] = []
    j = n - 1
    for k in range(stages - 1, -1, -1):
        i = back[k][j][1]
        bounds.append((i, j))
        j = i - 1
    return tuple(reversed(bounds))


def estimated_split(table: RangeCosts, problem: SplitProblem, max_stages: int,
                    deadline: float | None = None) -> Bounds:
    """A split whose largest memory is close to the smallest, guessed from two ranges per layer; () if none.

    A range's memory is taken as additive: layer ``l`` adds what ``l..l+1``
    has more than ``l+1..l+1``, and its stash entry what ``l..l`` has with two
    entries more than with none. The smallest largest estimate is found by
    bisection, filling stages from the last layer backwards, each as long
    as the estimate allows (the longest last stages leave the most room to
    the first ones, which carry the deepest stashes). Only the split is kept:
    its real memory is an upper bound on the optimum; its estimate is not.
    """
    n = table.num_layers
    if problem.exact_ipus or n == 0:
        return ()
    alone, pair, stash = [], [], []
    for k in range(n):  # row by row, two ranges each: a lazy table builds each row once
        check_deadline(deadline)
        alone.append(table.memory(k, k, 0))
        pair.append(table.memory(k, k + 1, 0) if k + 1 < n else 0.0)
        stash.append((table.memory(k, k, 2) - alone[k]) / 2 if problem.training else 0.0)
    if any(math.isinf(x) for x in (*alone, *pair, *stash)):
        return ()
    adds = [0.0]  # prefix sums of what each layer adds to the layers after it
    for k in range(n - 1):
        adds.append(adds[-1] + max(pair[k] - alone[k + 1], 0.0))
    stashes = [0.0]
    for k in range(n):
        stashes.append(stashes[-1] + stash[k])
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    end_ok = [j == n - 1 or problem.allowed_split(j, forbidden) for j in range(n)]
    pins = frozenset(p for p in problem.split_after if p < n - 1)

    def estimate(i: int, j: int, r: int) -> float:
        position, count = slot(i, r)
        extra = extra_stash_entries(position, count, table.head_wraps) if problem.training else 0
        copy = copy_buffer_per_tile(*range_boundaries(table, i, j), table.tiles, problem.training)
        return alone[j] + adds[j] - adds[i] + extra * (stashes[j + 1] - stashes[i]) + copy

    def fill(target: float) -> Bounds:
        bounds: list[tuple[int, int]] = []
        end = n - 1
        for r in range(1, max_stages + 1):
            start = None
            for i in range(end, -1, -1):
                if (i in pins and i < end) or estimate(i, end, r) > target:
                    break
                if end - i + 1 >= problem.min_layers and (i == 0 or end_ok[i - 1]):
                    start = i
            if start is None:
                return ()
            bounds.append((start, end))
            if start == 0:
                return tuple(reversed(bounds))
            end = start - 1
        return ()

    lo, hi = 0.0, float(table.limit)
    if math.isinf(hi):  # a table with no limit (plain numbers): a target that fits, by doubling
        hi = 1.0
        while not fill(hi) and hi < 2.0**80:
            hi *= 2
    found = fill(hi)
    if not found:
        return ()
    for _ in range(40):  # to a few bytes: what matters is the split, not the figure
        mid = (lo + hi) / 2
        trial = fill(mid)
        if trial:
            hi, found = mid, trial
        else:
            lo = mid
    return found
