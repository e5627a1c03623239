"""Dynamic programming min-max split over a range table.

Exact for the first objective (:mod:`popliner.solvers.objective`: the largest stage cost) over contiguous
splits; the exact solver's first step. ``best[k][j]`` is the
smallest possible largest cost of layers ``0..j`` in ``k+1`` stages.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence

from popliner.deadline import OutOfTime, check_deadline
from popliner.pipeline import (
    RangeCosts,
    copy_buffer_per_tile,
    extra_stash_entries,
    position_memory,
    range_boundaries,
)
from popliner.solvers.objective import MEMORY, Objective, objective_order
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["OutOfTime", "RangeValues", "copy_buffers", "dp_for_stages", "dp_per_count", "suffix_rows",
           "value_floors"]


def dp_per_count(table: RangeCosts, problem: SplitProblem, objective: Objective | None = None,
                 deadline: float | None = None, cap: float = math.inf, *,
                 values: RangeValues | None = None, floors: Mapping[int, float] | None = None,
                 copies: Callable[[int, int], int] | None = None,
                 suffix_best: Sequence[Sequence[float]] | None = None) -> dict[int, tuple[Bounds, float] | None]:
    """The optimal split for each stage count the problem allows (exactly ``num_ipus`` when ``exact_ipus``).

    A count is not searched (None) when its first stage alone is above the best value of a smaller count,
    or its floor (``floors``, :func:`value_floors`) above that or the cap: it can neither be the optimum
    nor tie with it (docs/solvers.md, 'Exact').

    ``cap``: only splits whose value is at most ``cap`` are searched; a count
    whose optimum is above it is None. For an objective that does not read
    memory, a range whose value is over the cap is then never read from the
    table (the smallest of :func:`value_floors` is a cap that loses nothing). ``values``:
    the objective's :class:`RangeValues`, and ``copies`` (:func:`copy_buffers`), when the caller has them;
    ``suffix_best``: see :func:`dp_for_stages`.
    """
    objective = objective or objective_order(table, problem.objectives)[0]
    counts = problem.stage_counts
    out: dict[int, tuple[Bounds, float] | None] = {}
    best = math.inf
    # What every count reads alike, worked out once: copy buffers, and (when it needs no memory) each range's
    # value, listed within the cap (``values``: the caller's, worked out once per solve).
    shared = None if objective.uses_memory else RangeValues(table, objective, cap, of=values)
    copies = copies or copy_buffers(table)
    for k in counts:
        try:
            check_deadline(deadline)
            if k == counts[0]:
                _read_rows(table, problem, shared, max(counts))
            if floors is not None and floors.get(k, -math.inf) > min(cap, best):
                out[k] = None  # above the cap (the DP would find none within it) or no better than the best
                continue
            if k <= table.num_layers and _first_stage_floor(table, problem, k, objective) > best:
                out[k] = None
                continue
            out[k] = found = dp_for_stages(table, problem, k, objective, deadline, cap, shared=shared, copies=copies,
                                           suffix_best=suffix_best)
        except OutOfTime as stop:
            known = [f for f in out.values() if f is not None]
            raise OutOfTime(min(known, key=lambda f: f[1]) if known else None) from stop
        if found is not None:
            best = min(best, found[1])
    return out


def value_floors(table: RangeCosts, problem: SplitProblem, objective: Objective | None = None, *,
                 values: RangeValues | None = None) -> dict[int, float]:
    """Per stage count, the best value of a split with memory left out (``inf``: none), for an objective that does
    not read memory (else no count: no floor); no split of that count that fits does better.

    With no memory a range's value is the same at every position of
    every count, so one pass over ``k`` stages gives every count (``k``
    stages end at the last layer in row ``k - 1``), from each range's value
    taken once (``values``: the objective's, when the caller has them).
    """
    objective = objective or objective_order(table, problem.objectives)[0]
    if objective.uses_memory:
        return {}
    n = table.num_layers
    counts = problem.stage_counts
    stages = min(max(counts), n)
    if values is None:
        values = RangeValues(table, objective, math.inf)
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    cut = [max((p for p in problem.split_after if p < j), default=-1) for j in range(n)]
    ends = [j for j in range(n) if j == n - 1 or problem.allowed_split(j, forbidden)]
    least = problem.min_layers
    inf = math.inf
    floors = dict.fromkeys(counts, inf)  # a count above the number of layers has no split
    if n == 0:
        return floors
    # One stage: layers 0..j, when it holds enough of them and crosses no pin.
    row = [max(0.0, values.value(0, j)) if j + 1 >= least and cut[j] < 0 else inf for j in range(n)]
    row = [row[j] if j in ends else inf for j in range(n)] if len(ends) < n else row
    if 1 in floors:
        floors[1] = row[n - 1]
    # Per end j: its column of values, the bound on them, and the first layers to visit (once, not once per k).
    visits = [(j, values.column(j), values.lowest[j], range(min(j, j - least + 1), max(cut[j], 0), -1)) for j in ends]
    for k in range(1, stages):
        new = [inf] * n
        for j, column, lowest, starts in visits:
            best = inf
            # From the latest first layer down; pins stop it, and so does the bound on every value left.
            for i in starts:
                if lowest[i] >= best:
                    break  # every range from an earlier layer is worth at least this: none improves the minimum
                prev = row[i - 1]
                if prev < inf:
                    value = column[i]
                    value = prev if prev > value else value
                    if value < best:  # min(best, value): ties keep the best
                        best = value
            new[j] = best
        row = new
        if k + 1 in floors:
            floors[k + 1] = row[n - 1]
    return floors


class RangeValues:
    """Each range's value (for an objective that does not read memory), and per last layer the first layers
    of the ranges within ``cap`` (later first, as the DP visits them).

    ``lowest[j][i]``: the smallest value of a range ending at ``j`` that starts at a layer from 1 to ``i``,
    the bound on a column's values still to come (docs/solvers.md, 'Exact').
    ``of``: the same values under another cap (worked out once per solve).
    """

    def __init__(self, table: RangeCosts, objective: Objective, cap: float, *, of: RangeValues | None = None) -> None:
        n = table.num_layers
        self.cap = cap
        if of is None:
            stage_value = objective.stage_value
            self._values = [[math.inf] * i + [stage_value(table, i, j, 0.0) for j in range(i, n)] for i in range(n)]
            # By last layer (the columns the DP walks), once: read as tuples rather than value by value.
            self._columns = list(zip(*self._values, strict=True))
            # Running minima from layer 1 (layer 0 starts only the first stage, which has no bound).
            self.lowest = [[math.inf, *itertools.accumulate(self._columns[j][1:j + 1], min)] for j in range(n)]
        else:
            self._values, self._columns, self.lowest = of._values, of._columns, of.lowest
        self.starts = [[i for i in range(j, 0, -1) if column[i] <= cap] for j, column in enumerate(self._columns)]

    def value(self, i: int, j: int) -> float:
        return self._values[i][j]

    def column(self, j: int) -> tuple[float, ...]:
        """The values of the ranges ending at ``j`` (``column(j)[i]`` is :meth:`value`), for a loop over ``i``."""
        return self._columns[j]

    def row(self, i: int) -> list[float]:
        """The values of the ranges from ``i`` (``row(i)[j]`` is :meth:`value`), for a loop over ``j``."""
        return self._values[i]


def _read_rows(table: RangeCosts, problem: SplitProblem, within: RangeValues | None, stages: int) -> None:
    """Read the rows of the table the DP uses, each once and in order, as far as the DP can use them.

    A lazy table then extends each row in one go (the DP reads column by
    column, which would switch rows at every range). ``within``: a cap on an
    objective that does not read memory; a row then goes up to its last range
    within it, else to the end (the table stops it at its limit). One stage
    reads only the row from layer 0.
    """
    n = table.num_layers
    cap = within.cap if within is not None else math.inf
    for i in range(n if stages > 1 else min(n, 1)):
        first = i + problem.min_layers - 1
        row = within.row(i) if within is not None else None
        # The row's last range within the cap: the first found from the end.
        last = next((j for j in range(n - 1, first - 1, -1) if row is None or row[j] <= cap), None)
        if last is not None:
            table.memory(i, last, 0)


def suffix_rows(suffix_best: Sequence[Sequence[float]] | None, stages: int, n: int) -> list[Sequence[float]]:
    """Per position ``p`` of ``stages``: per layer ``i``, whether layers ``i..`` fit in the ``stages - 1 - p``
    stages after it (``inf``: no), from the suffix DP's ``best`` (every layer fits, without it)."""
    if suffix_best is None:
        return [[0.0] * (n + 1)] * stages
    if len(suffix_best) < stages:
        raise ValueError(f"a suffix DP of {len(suffix_best) - 1} stages at most, for a split of {stages}")
    return [suffix_best[stages - 1 - p] for p in range(stages)]


def copy_buffers(table: RangeCosts) -> Callable[[int, int], int]:
    """Per tile, the copy buffers of range ``i..j`` (as :func:`position_memory` adds them), each computed once."""
    memo: dict[tuple[int, int], int] = {}

    def copies(i: int, j: int) -> int:
        hit = memo.get((i, j))
        if hit is None:
            hit = memo[(i, j)] = copy_buffer_per_tile(*range_boundaries(table, i, j), table.tiles)
        return hit

    return copies


def _first_stage_floor(table: RangeCosts, problem: SplitProblem, stages: int, objective: Objective) -> float:
    """A lower bound on the optimum with ``stages`` stages: the smallest value any first stage can have.

    The first stage is ``0..j`` at position 0, with ``j = n-1`` for one stage
    and ``j <= n - stages`` otherwise (every other stage holds a layer).
    """
    if objective is not MEMORY:
        return -math.inf  # a bound on memory says nothing of another objective
    n = table.num_layers
    ends = [n - 1] if stages == 1 else range(n - stages + 1)
    return min((position_memory(table, 0, j, 0, stages, problem.training) for j in ends), default=math.inf)


def dp_for_stages(table: RangeCosts, problem: SplitProblem, stages: int, objective: Objective | None = None,
                  deadline: float | None = None, cap: float = math.inf, *, shared: RangeValues | None = None,
                  copies: Callable[[int, int], int] | None = None,
                  suffix_best: Sequence[Sequence[float]] | None = None) -> tuple[Bounds, float] | None:
    """Optimal split into exactly ``stages`` stages, or None when none fits (:class:`OutOfTime` past ``deadline``).

    ``cap``: None too when the optimum is above it (see :func:`dp_per_count`).
    ``shared`` and ``copies``: what :func:`dp_per_count` works out once for every count.
    ``suffix_best``: the suffix DP's ``best`` of the table under the same problem, bound by the table's limit, for
    ``stages`` stages or more (:class:`popliner.solvers.suffix.SuffixTable`): ``suffix_best[r][i]`` is ``inf`` when
    layers ``i..`` fit in no ``r`` stages. A stage ending at ``j`` with the layers after it fitting in no split of
    the stages left is on no whole split: its column is not visited (:func:`suffix_rows`).
    """
    objective = objective or objective_order(table, problem.objectives)[0]
    value_of = objective.stage_value
    n = table.num_layers
    if stages > n:
        return None
    if table.memory(0, 0, extra_stash_entries(0, stages, table.head_wraps) if problem.training else 0) == math.inf:
        # The first stage holds layer 0 and cannot fit even that with its stash entries at this
        # depth: nothing fits (the loops below would find the same, after visiting every range).
        return None
    # When the value needs no memory: ranges over the cap are in no split within it, and are not even read;
    # and each column stops once no range left in it can improve on the best (RangeValues.lowest).
    if shared is None and not objective.uses_memory:
        shared = RangeValues(table, objective, cap)
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    inf = math.inf
    limit = table.limit
    copies = copies or copy_buffers(table)
    memory_of = table.memory
    # For each j, the largest layer after which a stage must end that lies before j: no range may cross it.
    cut = [max((p for p in problem.split_after if p < j), default=-1) for j in range(n)]
    best = [[inf] * n for _ in range(stages)]
    back = [[-1] * n for _ in range(stages)]
    splittable = [problem.allowed_split(j, forbidden) for j in range(n)]  # once, not once per position
    least = max(problem.min_layers, 1)
    fits_after = suffix_rows(suffix_best, stages, n)
    for k in range(stages):
        check_deadline(deadline)
        # What position_memory reads, once per range: the stash entries of position k.
        extra = extra_stash_entries(k, stages, table.head_wraps) if problem.training else 0
        here, before = best[k], (best[k - 1] if k > 0 else None)  # this position's best, and the one before's
        after = fits_after[k]  # after[j + 1]: inf when the layers after j fit in no split of the stages after k
        # Position k ends after its k + 1 positions' layers and leaves at least ``least`` for each one after
        # it: other ends are on no whole split (their best stays unused), so they are not visited.
        for j in range((k + 1) * least - 1, n - (stages - 1 - k) * least):
            if j < n - 1 and (k == stages - 1 or not splittable[j]):
                continue  # only the last stage ends at the last layer; splits must be allowed
            if after[j + 1] == inf:
                continue  # the layers after it fit in no split of the stages left: on no whole split
            # The first stage starts at layer 0, and only it does. Within a cap, only the ranges within it
            # are visited (and read): still in the same order, so that ties go the same way.
            if k == 0:
                starts: Iterable[int] = [0] if shared is None or shared.value(0, j) <= cap else []
            else:
                starts = range(j, 0, -1) if shared is None else shared.starts[j]
            # A bound on the value of every range left in the column (later first layers first); none on
            # the first stage, which has a single range.
            lowest = shared.lowest[j] if shared is not None and k > 0 else None
            column = shared.column(j) if shared is not None else None
            cut_j = cut[j]
            latest = j - problem.min_layers + 1  # the latest first layer of a range with enough layers
            found = here[j]
            for i in starts:
                if lowest is not None and lowest[i] >= found:
                    break  # no range still to come is worth less than the best: none replaces it (ties keep it)
                if i > latest:
                    continue
                if i <= cut_j:
                    break
                prev = 0.0 if before is None else before[i - 1]
                if prev == inf:
                    continue
                base = memory_of(i, j, extra)
                if base == inf:
                    break  # over the limit before its copy buffers: longer ranges (smaller i) only use more
                total = base + copies(i, j)
                if total > limit:
                    continue  # over the limit with its copy buffers; a longer range may still fit
                value = column[i] if column is not None else value_of(table, i, j, total)
                if not value > prev:  # max(prev, value): ties keep prev
                    value = prev
                if value > cap:
                    continue
                if value < found:
                    found = here[j] = value
                    back[k][j] = i
    if best[stages - 1][n - 1] == inf:
        return None
    bounds: list[tuple[int, int]] = []
    j = n - 1
    for k in range(stages - 1, -1, -1):
        i = back[k][j]
        bounds.append((i, j))
        j = i - 1
    return tuple(reversed(bounds)), best[stages - 1][n - 1]
