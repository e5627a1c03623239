"""The ranges each stage position of a K-stage split may hold: one enumeration for the exact solvers.

:mod:`popliner.solvers.lexdp` walks them as a layered graph; the tests' CP-SAT oracle (tests/ilp_oracle.py)
makes them its variables.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from popliner.deadline import check_deadline
from popliner.pipeline import RangeCosts, extra_stash_entries
from popliner.solvers.dp import RangeValues, copy_buffers, suffix_rows
from popliner.solvers.objective import Objective
from popliner.solvers.problem import SplitProblem

__all__ = ["Edges", "position_edges"]

#: Per position, the edges: (first layer, last layer, each objective's value).
Edges = list[list[tuple[int, int, tuple[int, int, int]]]]


def position_edges(table: RangeCosts, problem: SplitProblem, stages: int, order: tuple[Objective, Objective, Objective],
                   cap: float, deadline: float | None, first: RangeValues | None = None, *, from_start: bool = False,
                   copies: Callable[[int, int], int] | None = None,
                   suffix_best: Sequence[Sequence[float]] | None = None) -> Edges:
    """Per stage position, every range it may hold whose objective 1 is within ``cap``, with each objective's value.

    The exact DPs' graph and the CP-SAT model's variables: a range fits its
    position (stash entries, copy buffers), honours pins, same-IPU pairs and
    the minimum layers, and lies on some whole split.

    ``first``: objective 1's value of each range, when it needs no memory: a range over the cap is then
    no edge without its memory being read. ``from_start``: only the edges some path from layer 0 reaches
    (the DP's paths are the same; CP-SAT's model keeps every edge). ``copies``: each range's copy buffers
    per tile, when the caller has them (:func:`popliner.solvers.dp.copy_buffers`). ``suffix_best``: the suffix
    DP's ``best`` of the table (:func:`popliner.solvers.dp.dp_for_stages` says which): a range after which the
    layers left fit in no split of the positions left is on no whole split, and no edge (CP-SAT's model, which
    keeps every edge, is built without it).
    """
    n = table.num_layers
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    copies = copies or copy_buffers(table)
    limit = table.limit
    edges: Edges = []
    # Each position holds at least ``least`` layers, so position p starts no earlier than p * least and
    # leaves that many for each position after it: a range outside those bounds is on no whole path.
    # (Not reading them is most of the saving when the stage count is high.)
    least = max(problem.min_layers, 1)
    splittable = [problem.allowed_split(j, forbidden) for j in range(n)]  # once, not once per range
    # Objective 1's value from ``first`` (the same figure: it reads no memory), else per range; the others per range
    # (three named calls: a loop over them took twice as long, tens of thousands of edges a plan).
    value_1, value_2, value_3 = (o.stage_value for o in order)
    # Per first layer, the first pinned split at or after it: no range from it goes past it (once, not per position).
    pins = [min((q for q in problem.split_after if q >= i), default=n) for i in range(n + 1)]
    reached = {0}
    memory_of = table.memory
    fits_after = suffix_rows(suffix_best, stages, n)
    # Per first layer, where a range from it may end before the last position, in order: an allowed split, and
    # (with ``first``) objective 1 within the cap. Once per call, not once per position: every position reads
    # the same ends of a row, up to its own last end.
    inner_end = [j < n - 1 and splittable[j] for j in range(n)]
    inner_ends = []
    for i in range(n):
        row_values = first.row(i) if first is not None else None
        inner_ends.append([j for j in range(i + problem.min_layers - 1, n)
                           if inner_end[j] and (row_values is None or row_values[j] <= cap)])
    for p in range(stages):
        check_deadline(deadline)
        row = []
        last_position = p == stages - 1
        latest_end = n - 1 - (stages - 1 - p) * least
        # What position_memory adds to the range's own model: this position's stash entries (once per position).
        extra = extra_stash_entries(p, stages, table.head_wraps) if problem.training else 0
        after = fits_after[p]  # after[j + 1]: inf when the layers after j fit in no split of the positions after p
        for i in [0] if p == 0 else range(max(1, p * least), n - (stages - p) * least + 1):
            if from_start and i not in reached:
                continue  # no path from layer 0 gets here: its ranges are on no whole split
            last_end = min(pins[i], latest_end)
            row_values = first.row(i) if first is not None else None
            if last_position:
                # Only the last layer ends the last position.
                ends = [n - 1] if i + problem.min_layers - 1 <= n - 1 <= last_end and (
                    row_values is None or row_values[n - 1] <= cap) else []
            else:
                ends = inner_ends[i]
            for j in ends:
                if j > last_end:
                    break  # the ends are in order: the others are past this position's last end too
                if after[j + 1] == math.inf:
                    continue  # on no whole split (a later end may be)
                base = memory_of(i, j, extra)
                if base == math.inf:
                    break  # over the limit before its copy buffers: longer ranges only use more memory
                mem = base + copies(i, j)  # position_memory's figure
                if mem > limit:
                    continue
                values = (int(row_values[j]) if row_values is not None else int(value_1(table, i, j, mem)),
                          int(value_2(table, i, j, mem)), int(value_3(table, i, j, mem)))
                if values[0] <= cap:
                    row.append((i, j, values))
        edges.append(row)
        reached = {j + 1 for _, j, _ in row}
    return edges
