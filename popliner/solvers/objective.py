"""What the solvers minimise, and in what order: the one place an objective is defined.

A split is scored by a tuple of objectives compared lexicographically; each
is a figure per stage combined over a split's stages by ``max`` or ``sum``.
docs/solvers.md ('Exact') lists the default order (:func:`objective_order`:
``cycles``, else ``memory`` when the profile has no cycles; ``memory``;
``crossing``), which solver minimises which, and how a new objective is
added (one more :class:`Objective` in :data:`OBJECTIVES`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from popliner.errors import UsageProblem
from popliner.pipeline import RangeCosts, position_memory, range_cost
from popliner.solvers.problem import Bounds, SplitProblem

__all__ = ["CROSSING", "CYCLES", "MEMORY", "OBJECTIVES", "Objective", "objective_order", "split_objectives",
           "split_value"]

#: One stage's figure: (table, first layer, last layer, the stage's worst-tile memory at its position).
StageValue = Callable[[RangeCosts, int, int, float], float]


@dataclass(frozen=True)
class Objective:
    """A figure the solvers minimise: per stage, and how the stages of a split combine."""

    name: str
    #: What the split summary's note says is minimised.
    title: str
    combine: Literal["max", "sum"]
    stage_value: StageValue
    #: Does ``stage_value`` read the memory it is given? If not, a solver may take a range's value before
    #: reading its memory, and leave a range over a bound on the value unread.
    uses_memory: bool = True


def _cycles(table: RangeCosts, i: int, j: int, memory: float) -> float:
    return float(range_cost(table, i, j))


def _memory(table: RangeCosts, i: int, j: int, memory: float) -> float:
    return memory


def _crossing(table: RangeCosts, i: int, j: int, memory: float) -> float:
    # The bytes a stage sends on: nothing after the last layer.
    return float(table.crossing(j)) if j < table.num_layers - 1 else 0.0


CYCLES = Objective("cycles", "largest stage cycles (compute + received transfer)", "max", _cycles, uses_memory=False)
MEMORY = Objective("memory", "largest stage worst-tile bytes", "max", _memory)
CROSSING = Objective("crossing", "bytes sent between IPUs", "sum", _crossing, uses_memory=False)

#: Every objective by name.
OBJECTIVES: dict[str, Objective] = {o.name: o for o in (CYCLES, MEMORY, CROSSING)}


def objective_order(table: RangeCosts, first: Sequence[str] = ()) -> tuple[Objective, Objective, Objective]:
    """The three objectives in the order they are minimised.

    By default throughput first (``cycles``; ``memory`` on a profile without
    cycles), then memory, then crossing. ``first`` names objectives to put
    ahead; the defaults follow, three in all.
    """
    unknown = [name for name in first if name not in OBJECTIVES]
    if unknown:
        raise UsageProblem(f"unknown objective(s) {', '.join(unknown)}; expected some of {', '.join(OBJECTIVES)}")
    default = (CYCLES if table.has_cycles else MEMORY, MEMORY, CROSSING)
    chosen = [OBJECTIVES[name] for name in first]
    order = (*chosen, *default)[:3]
    if order[0].combine != "max":
        raise UsageProblem(f"objective {order[0].name} adds up over the stages: it cannot come first "
                           "(the exact DP minimises the worst stage)")
    sums = [n for n, o in enumerate(order) if o.combine == "sum"]
    if sums and any(o.combine == "max" for o in order[sums[0]:]):
        raise UsageProblem(f"objective order {', '.join(o.name for o in order)}: an objective that adds up "
                           "comes before a worst-stage one (the exact DP needs every worst-stage one first)")
    return order[0], order[1], order[2]


def split_value(objective: Objective, table: RangeCosts, bounds: Sequence[tuple[int, int]],
                memories: Sequence[float]) -> float:
    """``objective`` over a whole split, from each stage's bounds and memory at its position."""
    values = [objective.stage_value(table, i, j, m) for (i, j), m in zip(bounds, memories, strict=True)]
    return max(values) if objective.combine == "max" else float(sum(values))


def split_objectives(table: RangeCosts, problem: SplitProblem, bounds: Bounds) -> tuple[int, int, int] | None:
    """The three objectives of a split, in order, or None if it breaks a limit (a stage over it, too many)."""
    k = len(bounds)
    if k == 0 or k not in problem.stage_counts:
        return None
    order = objective_order(table, problem.objectives)
    memories = [position_memory(table, i, j, p, k, problem.training) for p, (i, j) in enumerate(bounds)]
    if math.inf in memories:
        return None
    values = [[int(o.stage_value(table, i, j, m)) for (i, j), m in zip(bounds, memories, strict=True)] for o in order]
    a, b, c = (max(v) if o.combine == "max" else sum(v) for o, v in zip(order, values, strict=True))
    return a, b, c
