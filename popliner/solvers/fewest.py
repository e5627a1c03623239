"""The fewest stages that fit, settled from a few rows when a split over ``upto`` stages is known to fit.

:func:`popliner.solvers.solve.minimum_ipus` answers every stage count at
once with the suffix DP, but that reads nearly every range under the
budget: after a solve, the summary's "it would also fit on K IPUs" cost
more than the solve. Here each count ``K = 1, 2, ...`` is settled by two
greedy passes from the first layer:

* **A proof that K stages cannot fit.** Range memory only grows with the
  range (the suffix DP's own pruning rests on it), and a stage's stash
  entries depend only on its position among the K. So filling stage ``p``
  from where stage ``p - 1`` ended, as far as its memory (stash entries of
  position ``p``, copy buffers left out) stays within the bound, ends at
  or after the end of stage ``p`` of any split of K stages that fits: if
  the passes do not reach the last layer, none fits. No stage may run past
  a pinned split (a later start has the same pin or a later one, so the
  argument holds with them). Minimum stage lengths and forbidden splits
  only take splits away: leaving them out keeps the proof sound. Copy
  buffers are counted at their least: a stage after the first receives
  and one before the last sends at least the fewest bytes that cross any
  boundary, so every stage of a fitting split has at least that much
  memory beside its range's (without it the proof let through counts the
  witness then failed on, and the suffix DP ran: 0.6 s of the 4x profile's
  1.2 s over 64 IPUs).
* **A witness that K stages fit.** The same fill, each stage ending at the
  furthest layer the suffix DP would accept as its end (its copy buffers
  included, within its pin, an allowed split, at least the minimum
  length): a split of exactly K stages found this way is one the DP
  counts, so K is the answer.

The first K not ruled out and witnessed is the fewest. When the witness
pass fails where the proof did not (a pin or copy buffers in the way), the
answer is not settled and the caller asks the suffix DP, so the answer is
always the DP's (tests/test_fewest.py holds the two together).
"""

from __future__ import annotations

from popliner.pipeline import RangeCosts, extra_stash_entries, position_memory, spread_over_tiles
from popliner.solvers.problem import SplitProblem
from popliner.solvers.suffix import slot

__all__ = ["fewest_within"]


def fewest_within(table: RangeCosts, problem: SplitProblem, upto: int) -> int | None:
    """The fewest stages (at most ``upto``) that fit within ``table.limit``; None when not settled here.

    None means that the two passes could not decide: the caller then runs
    :func:`popliner.solvers.solve.minimum_ipus`, which always can.
    """
    n = table.num_layers
    for stages in range(1, min(upto, n) + 1):
        if not _may_fit(table, problem, stages):
            continue
        return stages if _fits(table, problem, stages) else None
    return None


def _extra(table: RangeCosts, problem: SplitProblem, start: int, stages_left: int) -> tuple[int, int, int]:
    """(position, count, extra stash entries) of a stage from ``start`` with ``stages_left`` stages to the end."""
    position, count = slot(start, stages_left)
    extra = extra_stash_entries(position, count, table.head_wraps) if problem.training else 0
    return position, count, extra


def _pins(problem: SplitProblem, n: int) -> list[int]:
    return sorted(p for p in problem.split_after if p < n - 1)


def _pin(pins: list[int], start: int, n: int) -> int:
    """The last layer a stage from ``start`` may hold: the first pinned split at or after it (as the DP reads)."""
    return next((q for q in pins if q >= start), n - 1)


def _may_fit(table: RangeCosts, problem: SplitProblem, stages: int) -> bool:
    """False only when no split into ``stages`` stages fits (the fill on memory alone falls short)."""
    n, bound = table.num_layers, float(table.limit)
    pins = _pins(problem, n)
    least = min((table.crossing(b) for b in range(n - 1)), default=0)  # the fewest bytes any boundary carries
    end = -1  # the last layer placed so far
    for p in range(stages):
        start = end + 1
        extra = _extra(table, problem, start, stages - p)[2]
        last = _pin(pins, start, n)
        # The least copy buffers of a stage at position p: it receives unless first, sends unless last.
        copies = spread_over_tiles(least * ((p > 0) + (p < stages - 1)), table.tiles)
        while end + 1 <= last and table.memory(start, end + 1, extra) + copies <= bound:
            end += 1
        if end == n - 1:
            return True
        if end < 0:
            return False  # the first layer alone is over at the first position: every first stage holds it
        # Nothing fits from here at this position: a fitting split's stage p ends before ``start``
        # too, and a later position (fewer stash entries) may take the layer.
    return False


def _fits(table: RangeCosts, problem: SplitProblem, stages: int) -> bool:
    """Is there a split into exactly ``stages`` stages that the suffix DP counts? True only with one in hand."""
    n, bound = table.num_layers, float(table.limit)
    forbidden = table.forbidden_splits(problem.keep_shared_together)
    pins = _pins(problem, n)
    start = 0
    for p in range(stages):
        left = stages - p
        position, count, extra = _extra(table, problem, start, left)
        last = min(_pin(pins, start, n), n - 1 if left == 1 else n - 2)
        chosen = None
        for j in range(start, last + 1):
            if table.memory(start, j, extra) > bound:
                break  # memory only grows with the range
            if j - start + 1 < problem.min_layers or (left == 1 and j != n - 1):
                continue
            if j != n - 1 and not problem.allowed_split(j, forbidden):
                continue
            if position_memory(table, start, j, position, count, problem.training) <= bound:
                chosen = j
        if chosen is None:
            return False
        start = chosen + 1
    return start == n
