"""The smallest worst-tile memory of a split, reading only the ranges that can matter: a DP over suffixes.

``best[r][i]`` (layers ``i..n-1`` in exactly ``r`` stages) serves every stage
count at once, read from a lazy range table only as far as ``bound`` allows;
:func:`forward_bounds` then rebuilds the split the forward DP would pick.
Why it reads so little and gives the same split: docs/solvers.md, "Exact" (its paragraphs on suffix.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from popliner.deadline import check_deadline
from popliner.memory.ranges import Front, front_memory
from popliner.pipeline import RangeCosts, extra_stash_entries
from popliner.solvers.dp import copy_buffers
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["SuffixTable", "forward_bounds", "suffix_table"]

_INF = math.inf


@dataclass
class SuffixTable:
    """``best[r][i]``: the smallest largest memory of layers ``i..n-1`` in exactly ``r`` stages (``inf`` over the
    bound). The ranges themselves are not kept: :func:`forward_bounds` reads again the few it follows."""

    bound: float
    best: list[list[float]]

    def whole(self, stages: int) -> float:
        """The smallest largest memory of a split into exactly ``stages`` stages (``inf`` over the bound)."""
        return self.best[stages][0] if stages < len(self.best) else _INF


def suffix_table(table: RangeCosts, problem: SplitProblem, bound: float, max_stages: int,
                 deadline: float | None = None, *, copies: Callable[[int, int], int] | None = None) -> SuffixTable:
    """``best[r][i]`` for ``r <= max_stages``, rows ``n-1`` down to ``0`` (:class:`OutOfTime` past ``deadline``).

    ``copies``: each range's copy buffers per tile, when the caller has them (:func:`popliner.solvers.dp.copy_buffers`).
    """
    n = table.num_layers
    rows = min(max_stages, n)
    best = [[_INF] * (n + 1) for _ in range(rows + 1)]
    best[0][n] = -_INF  # nothing left to place
    out = SuffixTable(bound, best)
    lowest = [n + 1] * (rows + 1)  # per r: the smallest i with best[r][i] finite so far
    lowest[0] = n
    over: dict[int, int] = {}  # stash entries -> smallest last layer of a range over the bound (its start >= i)
    rule = _StageRule.of(table, problem, bound, rows)
    end_ok = rule.end_ok
    copies = copies or copy_buffers(table)
    front_of = table.front
    limit = table.limit
    fits = rule.fits
    for i in range(n - 1, -1, -1):
        check_deadline(deadline)
        stop = n  # ends at or past it are over the bound (a known range over it lies inside)
        known_over = sorted(over.items())  # by stash entries: a row's stages left, and so its entries, only grow
        taken = 0
        extras = rule.extras(i)
        # The row's worst tiles and copy buffers, each range's read once for every stage count (its stash entries).
        row_fronts: list[Front | None] = [None] * n
        row_copies: list[int | None] = [None] * n
        for r in range(1, min(rows, n - i) + 1):
            if i > 0 and r == max_stages:
                break  # a stage after the first leaves room for at least one before it
            if lowest[r - 1] > n:
                continue  # no r-1 stages fit after any end: none from here either
            # A (position, stage count) with r stages from it to the end; position 0 only for layer 0.
            extra = extras[r]
            # Ranges over the bound with at most this many stash entries bound this one too.
            while taken < len(known_over) and known_over[taken][0] <= extra:
                stop = min(stop, known_over[taken][1])
                taken += 1
            first, last = rule.ends(r, i)
            first = max(first, lowest[r - 1] - 1)  # no r - 1 stages fit after an earlier end
            last = min(last, stop - 1)
            value = _INF
            rest = best[r - 1]  # rest[j + 1]: the best of the layers after a range ending at j
            for j in range(first, last + 1):
                after = rest[j + 1]
                if after == _INF or not end_ok[j]:
                    continue
                front = row_fronts[j]
                if front is None:
                    front = row_fronts[j] = front_of(i, j)
                base = front_memory(front, extra, limit)  # table.memory(i, j, extra)
                if base > bound:
                    # Memory only grows with the range: every longer one from here, and every
                    # range holding this one with as many stash entries or more, is over too.
                    over[extra] = min(over.get(extra, n), j)
                    stop = min(stop, j)
                    break
                if base >= value:
                    # Nor does any longer one improve on the best so far (its memory is at least this one's
                    # base; ties keep the first): not read, and often never evaluated (a lazy table).
                    break
                # position_memory's figure, the range's copy buffers taken once for every stage count.
                extra_bytes = row_copies[j]
                if extra_bytes is None:
                    extra_bytes = row_copies[j] = copies(i, j)
                memory = base + extra_bytes
                if memory > fits:
                    continue  # its copy buffers take it over; a longer range may still fit
                # min(value, max(memory, after)), without the calls (the same ties).
                worst = after if after > memory else memory
                if worst < value:
                    value = worst
            if value < _INF:
                best[r][i] = value
                if i < lowest[r]:
                    lowest[r] = i
    return out


def forward_bounds(table: RangeCosts, problem: SplitProblem, suffixes: SuffixTable, stages: int,
                   value: float) -> Bounds:
    """The split into ``stages`` stages of largest memory ``value`` that the forward DP would pick.

    :func:`popliner.solvers.dp.dp_for_stages` keeps, for each stage ending
    at ``j``, the latest start among those of smallest value; here the same
    choice is made over the states from which the rest of the layers still
    fit in ``value`` (every state on an optimal split is one of them).
    ``suffixes``: :func:`suffix_table` of ``table`` and ``problem``.
    """
    n = table.num_layers
    best = suffixes.best
    fitting = _fitting(table, problem, suffixes)
    reached: dict[int, tuple[float, int]] = {-1: (-_INF, -1)}  # end of the previous stage -> (value, start)
    back: list[dict[int, tuple[float, int]]] = []
    for k in range(stages):
        r = stages - k
        here: dict[int, tuple[float, int]] = {}
        for end in sorted(reached):
            i = end + 1
            prev = reached[end][0]
            for j, memory in fitting(r, i):
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


def _fitting(table: RangeCosts, problem: SplitProblem,
             suffixes: SuffixTable) -> Callable[[int, int], list[tuple[int, float]]]:
    """``fitting(r, i)``: the ranges from layer ``i`` with ``r`` stages from it to the end that fit the bound and
    after which the rest fits in ``r - 1`` stages, with their memory (stash entries, copy buffers), in order of
    last layer: those :func:`suffix_table` weighs, by its rule (:class:`_StageRule`) without its shortcuts (it keeps
    none of them: a pod plan reads hundreds of thousands, a best effort follows a few)."""
    best, bound = suffixes.best, suffixes.bound
    rule = _StageRule.of(table, problem, bound, len(best) - 1)
    copies = copy_buffers(table)

    def fitting(r: int, i: int) -> list[tuple[int, float]]:
        extra = rule.extras(i)[r]
        first, last = rule.ends(r, i)
        out: list[tuple[int, float]] = []
        for j in range(first, last + 1):
            if best[r - 1][j + 1] == _INF or not rule.end_ok[j]:
                continue
            base = table.memory(i, j, extra)
            if base > bound:
                break  # memory only grows with the range
            memory = base + copies(i, j)
            if memory <= rule.fits:
                out.append((j, memory))
        return out

    return fitting


@dataclass(frozen=True)
class _StageRule:
    """Which ranges a stage from layer ``i`` with ``r`` stages from it to the end (itself included) may be, and its
    stash entries: the rule :func:`suffix_table` weighs ranges by (with its shortcuts) and :func:`forward_bounds`
    follows again (:func:`_fitting`), made once per table and problem."""

    #: The layers.
    n: int
    #: The fewest layers of a stage.
    min_layers: int
    #: Per last layer ``j``: may a stage end there (the last layer, or an allowed split)?
    end_ok: list[bool]
    #: Per first layer ``i``: the first pinned split at or after it (``n - 1``: none); no stage goes past it.
    pins: list[int]
    #: Per ``r``: the stash entries of a stage from layer ``i > 0`` (position 1 of ``r + 1``: a stage before it).
    later: list[int]
    #: Per ``r``: the stash entries of a stage from layer 0 (position 0 of ``r``).
    first_row: list[int]
    #: What a range's memory with its copy buffers must stay within: the table's limit and the bound.
    fits: float

    @classmethod
    def of(cls, table: RangeCosts, problem: SplitProblem, bound: float, rows: int) -> _StageRule:
        """The rule of ``table`` and ``problem`` under ``bound``, for up to ``rows`` stages from a layer to the end."""
        n = table.num_layers
        forbidden = table.forbidden_splits(problem.keep_shared_together)
        pins = []
        pin = n - 1
        for i in range(n - 1, -1, -1):
            if i in problem.split_after and i < n - 1:
                pin = i
            pins.append(pin)
        wraps = table.head_wraps
        return cls(n, problem.min_layers, [j == n - 1 or problem.allowed_split(j, forbidden) for j in range(n)],
                   pins[::-1],
                   [extra_stash_entries(1, r + 1, wraps) if problem.training else 0 for r in range(rows + 1)],
                   [extra_stash_entries(0, r, wraps) if problem.training else 0 for r in range(rows + 1)],
                   min(table.limit, bound))

    def extras(self, i: int) -> list[int]:
        """Per ``r``: the stash entries of a stage from layer ``i`` with ``r`` stages from it to the end."""
        return self.first_row if i == 0 else self.later

    def ends(self, r: int, i: int) -> tuple[int, int]:
        """The first and last layer a stage from ``i`` with ``r`` stages from it to the end may end at: it holds
        the fewest layers or more and goes past no pin; only the last stage (``r`` = 1) ends at the last layer."""
        last_layer = self.n - 1
        if r == 1:
            return max(i + self.min_layers - 1, last_layer), min(self.pins[i], last_layer)
        return i + self.min_layers - 1, min(self.pins[i], last_layer - 1)
