"""PopART's pipeline rules, in one place, and the figure of an IPU in a pipeline.

The rules are stated in the docs: stage numbering in docs/pipeline-config.md,
stash depth, copy buffers and an IPU's memory (model + stash + copy buffers)
in docs/solvers.md ('Training', 'An IPU's memory'), a head wrapped onto IPU 0
in docs/solvers.md ('--head-placement'). :func:`stage_figures` (any placement,
from a scenario's memory facts), :func:`range_figure` (one contiguous range at
position ``k`` of ``K``) and :func:`position_memory` (the worst tile from a range
table, for solvers) all apply that one formula, so the solver, ``popliner check``,
the simulator, the pipeline config, the tile plot and the planner give the same bytes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from popliner.layout import Layout
from popliner.memory.types import ComponentBytes, StageMemory

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts
    from popliner.memory.ranges import Front, ProfileRanges

__all__ = [
    "LayerPlacement",
    "RangeCosts",
    "StageFigure",
    "StageLayout",
    "backward_stage",
    "copy_buffer_per_tile",
    "extra_stash_entries",
    "head_stage",
    "head_wraps_at",
    "num_pipeline_stages",
    "position_memory",
    "range_boundaries",
    "range_cost",
    "range_figure",
    "spread_over_tiles",
    "stage_figures",
    "stash_depth",
]

# -- stage numbering ------------------------------------------------------------


def head_wraps_at(head_wraps: bool, num_ipus: int) -> bool:
    """Is the head a stage of its own on IPU 0? Only with ``wrap`` and a pipeline (2 IPUs or more)."""
    return head_wraps and num_ipus >= 2


def num_pipeline_stages(training: bool, num_ipus: int, head_wraps: bool = False) -> int:
    """P: K stages in inference, 2K-1 in training; a wrapped head adds one (docs/pipeline-config.md)."""
    extra = 1 if head_wraps_at(head_wraps, num_ipus) else 0
    return (2 * num_ipus - 1 + 2 * extra) if training else num_ipus + extra


def backward_stage(ipu: int, num_ipus: int, head_wraps: bool = False) -> int:
    """Pipeline stage of the backward pass on ``ipu`` in training: ``2K-2-ipu``, ``2K-ipu`` with a wrapped head."""
    if head_wraps_at(head_wraps, num_ipus):
        return 2 * num_ipus - ipu
    return 2 * num_ipus - 2 - ipu


def head_stage(num_ipus: int) -> int:
    """Pipeline stage of a wrapped head (on IPU 0; forward and backward in this one stage)."""
    return num_ipus


# -- stash ------------------------------------------------------------------------


def stash_depth(position: int, num_ipus: int, head_wraps: bool = False) -> int:
    """Stash entries PopART keeps on the IPU at ``position`` of ``num_ipus`` (training; docs/solvers.md)."""
    if head_wraps_at(head_wraps, num_ipus):
        return 2 * (num_ipus - position) + 1
    if position >= num_ipus - 1:
        return 0
    return 2 * (num_ipus - 1 - position) + 1


def extra_stash_entries(position: int, num_ipus: int, head_wraps: bool = False) -> int:
    """Entries beyond the one the single-IPU profile already holds."""
    return max(stash_depth(position, num_ipus, head_wraps) - 1, 0)


# -- every part of one split -------------------------------------------------------


@dataclass(frozen=True)
class LayerPlacement:
    """Where one part (a layer, the embedding or the head) runs: PopART ``virtualGraph`` and ``pipelineStage``.

    ``backward_stage`` is the pipeline stage its gradient ops get in training
    (PopART assigns it; listed so users can check), None in inference.
    """

    name: str
    ipu: int
    pipeline_stage: int
    backward_stage: int | None


@dataclass(frozen=True)
class StageLayout:
    """The IPU and the pipeline stages of every part of one split, worked out once from its layout.

    ``ipu_of`` maps each part (layer, ``embedding``, ``head``) to its IPU;
    ``head`` is the part that wraps onto IPU 0 as a stage of its own (None
    when nothing wraps). Pipeline configs, their YAML and snippets, the
    figures and the simulator read the stage numbers from here.
    """

    num_ipus: int
    training: bool
    head: str | None = None
    ipu_of: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(cls, layout: Layout, groups: Sequence[Sequence[str]], training: bool) -> StageLayout:
        """The split placing ``groups[k]`` (part names) on IPU k, under ``layout``."""
        head = layout.head_name if layout.wraps_in(groups) else None
        where = tuple((name, k) for k, group in enumerate(groups) for name in group)
        return cls(len(groups), training, head, where)

    @property
    def wraps(self) -> bool:
        """Is the head a pipeline stage of its own on IPU 0?"""
        return self.head is not None

    @property
    def num_stages(self) -> int:
        return num_pipeline_stages(self.training, self.num_ipus, self.wraps)

    @property
    def head_stage(self) -> int | None:
        """The stage of a wrapped head (forward and backward), else None."""
        return head_stage(self.num_ipus) if self.wraps else None

    def forward_stage(self, ipu: int) -> int:
        """The stage of ``ipu``'s forward pass: its own index, in both modes."""
        return ipu

    def backward_stage(self, ipu: int) -> int:
        """The stage of ``ipu``'s backward pass (in training)."""
        return backward_stage(ipu, self.num_ipus, self.wraps)

    def ipu_stages(self, ipu: int) -> tuple[int, ...]:
        """Every stage ``ipu`` runs, in order: its forward, a wrapped head, its backward (training, when apart)."""
        stages = [self.forward_stage(ipu)]
        if self.head_stage is not None and ipu == 0:
            stages.append(self.head_stage)
        back = self.backward_stage(ipu)
        return tuple(stages + ([back] if self.training and back != stages[0] else []))

    def stash_depth(self, ipu: int) -> int:
        """Stash entries PopART keeps on ``ipu`` (0 in inference)."""
        return stash_depth(ipu, self.num_ipus, self.wraps) if self.training else 0

    def placement(self, name: str, ipu: int) -> LayerPlacement:
        forward, backward = (head_stage(self.num_ipus),) * 2 if name == self.head else (ipu, self.backward_stage(ipu))
        return LayerPlacement(name, ipu, forward, backward if self.training else None)

    def placements(self, order: Sequence[str]) -> tuple[LayerPlacement, ...]:
        """One row per part in ``order`` (model order) that the split places."""
        where = dict(self.ipu_of)
        return tuple(self.placement(name, where[name]) for name in order if name in where)


# -- copy buffers -----------------------------------------------------------------


def spread_over_tiles(nbytes: int, tiles: int) -> int:
    """Bytes per tile of a buffer spread evenly over ``tiles`` tiles (0 without tiles)."""
    return math.ceil(nbytes / tiles) if tiles else 0


def copy_buffer_per_tile(bytes_in: int, bytes_out: int, tiles: int) -> int:
    """Per tile, the buffers of what an IPU receives (``bytes_in``) and sends on (``bytes_out``) per micro-batch.

    In training the bytes already hold each gradient sent back (docs/solvers.md, 'An IPU's memory').
    """
    return spread_over_tiles(bytes_in + bytes_out, tiles)


# -- from a range table (solvers) ------------------------------------------------

class RangeCosts(Protocol):
    """What a solver reads about contiguous layer ranges ``i..j`` (inclusive).

    :class:`popliner.memory.ranges.ProfileRanges` reads a profile;
    :class:`popliner.solvers.problem.ArrayRanges` takes plain numbers.
    """

    @property
    def num_layers(self) -> int: ...

    @property
    def layer_names(self) -> tuple[str, ...]: ...

    @property
    def has_cycles(self) -> bool: ...

    @property
    def has_unlayered(self) -> bool:
        """Are there operations without a layer (they go with the first range)?"""

    @property
    def head_wraps(self) -> bool:
        """Is there a head wrapped onto IPU 0 (``--head-placement wrap``)?

        It is not one of the ``num_layers`` layers placed: ``memory(0, j, .)``,
        ``compute(0, j)`` and ``cost(0, j)`` hold it, and ``crossing`` of the
        last layer is what the head receives.
        """

    @property
    def limit(self) -> float:
        """Largest worst-tile figure of interest; above it a range reads as ``inf``."""

    @property
    def tiles(self) -> int:
        """Tiles per IPU (copy buffers are spread over them; 0: no copy buffers)."""

    def memory(self, i: int, j: int, extra_stash: int) -> float:
        """Worst-tile bytes of the range's operations plus ``extra_stash`` stash entries, without copy buffers.

        ``inf`` over the limit; it only grows with the range, so every range
        holding an ``inf`` one is ``inf`` too. :func:`popliner.memory.ranges.front_memory` of :meth:`front`.
        """

    def front(self, i: int, j: int) -> Front:
        """The range's tiles that can be its worst at some stash depth (() over the limit at no extra entries).

        For a solver reading one range at several depths: the range is looked up once.
        """

    def compute(self, i: int, j: int) -> int:
        """Compute cycles of one micro-batch through the range."""

    def crossing(self, j: int) -> int:
        """Bytes crossing the boundary after layer ``j`` (0 for ``j < 0``; after the last layer, what a
        wrapped head receives, else 0)."""

    def transfer(self, nbytes: int) -> int:
        """Cycles to move ``nbytes`` over the IPU link."""

    def forbidden_splits(self, keep_shared_together: bool) -> frozenset[int]:
        """Layers after which no stage may end."""


def range_boundaries(costs: RangeCosts, i: int, j: int) -> tuple[int, int]:
    """(bytes received, bytes sent on) per micro-batch by the IPU holding range ``i..j``.

    With a wrapped head, the first IPU also receives what the head takes from
    the last IPU, which sends it on; when one range holds every layer there is
    no pipeline and nothing crosses.
    """
    if not costs.head_wraps:
        return costs.crossing(i - 1), costs.crossing(j)
    last = costs.num_layers - 1
    if i == 0 and j == last:
        return 0, 0
    into_head = costs.crossing(last)
    return (into_head if i == 0 else costs.crossing(i - 1)), costs.crossing(j)


def range_cost(costs: RangeCosts, i: int, j: int) -> int:
    """Compute cycles of range ``i..j`` plus the transfer of what its IPU receives (:func:`range_boundaries`)."""
    return costs.compute(i, j) + costs.transfer(range_boundaries(costs, i, j)[0])


def position_memory(costs: RangeCosts, i: int, j: int, position: int, num_ipus: int, training: bool) -> float:
    """Worst-tile bytes of range ``i..j`` on the IPU at ``position`` of ``num_ipus``; ``inf`` over the limit.

    The model, the stash entries of the position and the copy buffers of the range's two boundaries
    (:func:`range_boundaries`), the same on every tile.
    """
    base = costs.memory(i, j, extra_stash_entries(position, num_ipus, costs.head_wraps) if training else 0)
    if base == math.inf:
        return base
    total = base + copy_buffer_per_tile(*range_boundaries(costs, i, j), costs.tiles)
    return total if total <= costs.limit else math.inf


# -- from the memory facts (exact per-tile figures) ------------------------------


@dataclass(frozen=True, eq=False)
class StageFigure:
    """The memory of one IPU of a pipeline, per tile, and what it is made of.

    ``memory`` is the model of the IPU's operations (five components, per
    tile, as in the single-IPU profile); ``stash_entry_per_tile`` one
    activation stash entry; ``stash_entries`` the depth PopART keeps;
    ``copy_buffer`` the bytes per tile of its copy buffers.
    ``recompute_cycles`` is the forward work a recomputing stage runs again
    in its backward pass; it is part of ``backward_cycles``.
    """

    position: int
    num_ipus: int
    layers: tuple[int, ...]
    memory: StageMemory
    stash_entry_per_tile: np.ndarray
    stash_entries: int
    copy_buffer: int
    bytes_in: int
    bytes_out: int
    forward_cycles: int
    backward_cycles: int
    recompute_cycles: int = 0
    #: Cycles of a wrapped head on this IPU (its own pipeline stage, forward and backward), else 0.
    head_cycles: int = 0
    #: The part of ``bytes_in`` that goes the other way: gradients this IPU sends back (0 in inference).
    gradient_bytes_in: int = 0

    @property
    def stash_per_tile(self) -> np.ndarray:
        """What the stash adds to the profile, per tile: ``depth - 1`` entries."""
        return np.asarray(self.stash_entry_per_tile * max(self.stash_entries - 1, 0))

    @property
    def total_per_tile(self) -> np.ndarray:
        return np.asarray(self.memory.total_per_tile + self.stash_per_tile + self.copy_buffer)

    @property
    def worst_tile(self) -> int:
        """The tile with the largest total (lowest index on ties)."""
        total = self.total_per_tile
        return int(np.argmax(total)) if total.size else 0

    @property
    def worst_bytes(self) -> int:
        total = self.total_per_tile
        return int(total.max()) if total.size else 0

    @property
    def worst_tile_memory(self) -> ComponentBytes:
        """The model's five components on the worst tile (stash and copy buffer not included)."""
        return self.memory.on_tile(self.worst_tile) if self.memory.tiles else ComponentBytes()

    @property
    def cycles(self) -> int:
        """Compute cycles of one micro-batch on the IPU (a wrapped head's included)."""
        return self.forward_cycles + self.backward_cycles + self.head_cycles


def _figure(facts: MemoryFacts, layers: Sequence[int], ops: np.ndarray, position: int, plan: StageLayout,
            bytes_in: int, bytes_out: int, gradient_bytes_in: int = 0, memory: StageMemory | None = None,
            entry: np.ndarray | None = None) -> StageFigure:
    """One IPU's figure in the split ``plan`` (its stash depth; whether it holds a wrapped head).

    ``ops``: the IPU's operations (those of ``layers``, and the unlayered ones at position 0). ``memory`` and
    ``entry``: the model's figure of the IPU's operations and the stash entry of its own ones (without a wrapped
    head's), when the caller knows them already (a range table's).
    """
    from popliner.memory.stages import cycles_split, rerun_cycles, stage_memory, stash_entry_per_tile

    # A wrapped head is in ``layers`` (StageLayout.wraps: on IPU 0): its operations are the IPU's of its layer.
    holds_head = plan.wraps and position == 0
    of_head = facts.layer_of_op[ops] == facts.head_layer if holds_head else None
    own_ops = ops[~of_head] if of_head is not None else ops
    depth = plan.stash_depth(position)
    if not depth:
        entry = np.zeros(facts.tiles, np.int64)
    elif entry is None:
        entry = stash_entry_per_tile(facts, own_ops)
    forward, backward = cycles_split(facts, own_ops)
    head = sum(cycles_split(facts, ops[of_head])) if of_head is not None else 0
    return StageFigure(
        position=position, num_ipus=plan.num_ipus, layers=tuple(int(k) for k in layers),
        memory=stage_memory(facts, ops) if memory is None else memory,
        stash_entry_per_tile=entry, stash_entries=depth,
        copy_buffer=copy_buffer_per_tile(bytes_in, bytes_out, facts.tiles),
        bytes_in=bytes_in, bytes_out=bytes_out, forward_cycles=forward, backward_cycles=backward,
        recompute_cycles=rerun_cycles(facts, own_ops) if facts.training else 0,
        head_cycles=head, gradient_bytes_in=gradient_bytes_in if facts.training else 0,
    )


def stage_figures(facts: MemoryFacts, stages: Sequence[Sequence[int]]) -> tuple[StageFigure, ...]:
    """Each IPU's figure for a placement: ``stages[k]`` are the layer indices on IPU k.

    Stages need not be contiguous (``popliner check`` takes hand-edited
    configs); the bytes crossing into IPU ``k`` are those used both by the
    layers of IPUs ``0..k-1`` and by those of ``k..K-1``. With a wrapped head
    on IPU 0 (and 2 IPUs or more) the head counts as a stage after IPU K-1:
    IPU 0 receives what it takes from IPU K-1.
    """
    from popliner.memory.stages import stage_ops

    boundary_bytes = facts.boundaries.boundary_bytes
    count = len(stages)
    plan = StageLayout.of(facts.layout, [[facts.layout.names[k] for k in group] for group in stages],
                          facts.training)
    wraps = plan.wraps
    head = [facts.head_layer] if wraps else []
    order = [[x for x in stages[0] if x not in head], *stages[1:]]  # pipeline order, the head left out
    crossing = [0] * (count + 1)  # crossing[k]: into IPU k (0 into the first, 0 out of the last)
    gradients = [0] * (count + 1)  # the part of crossing[k] sent back (training)
    for k in range(1, count):
        before = [x for group in order[:k] for x in group]
        after = [x for group in order[k:] for x in group] + head
        crossing[k] = boundary_bytes(before, after)
        gradients[k] = boundary_bytes(before, after, gradients_only=True)
    if wraps:
        before = [x for group in order for x in group]
        crossing[0] = crossing[count] = boundary_bytes(before, head)
        gradients[0] = boundary_bytes(before, head, gradients_only=True)
    return tuple(_figure(facts, group, stage_ops(facts, group, first_stage=k == 0), k, plan, crossing[k],
                         crossing[k + 1], gradients[k]) for k, group in enumerate(stages))


def range_figure(facts: MemoryFacts, i: int, j: int, position: int, num_ipus: int,
                 table: ProfileRanges | None = None) -> StageFigure:
    """The figure of the contiguous layer range ``i..j`` on the IPU at ``position`` of ``num_ipus``.

    Exact for any contiguous split (the planner's view): the range receives
    the bytes crossing the boundary before layer ``i`` and sends those after
    layer ``j``. With a wrapped head, ``i..j`` index the layers before the
    head, and the range at position 0 holds the head too. ``table``: a range
    table of the same facts, whose running sets give the range's model
    figure and stash entry (the same figures, without a sweep).
    """
    from popliner.memory.stages import range_ops

    cross, back = facts.boundaries.crossing, facts.boundaries.gradient_crossing
    into = i - 1
    bytes_out = _at(cross, j)
    layers = list(range(i, j + 1))
    wraps = facts.layout.wraps_at(num_ipus)
    plan = StageLayout(num_ipus, facts.training, facts.layout.head_name if wraps else None)
    with_head = facts.layout.wraps and position == 0
    if with_head:
        layers.append(facts.head_layer)
        into = facts.head_layer - 1 if wraps else -1
        if not wraps:
            bytes_out = 0  # one IPU holds everything: nothing crosses
    memory = entry = None
    if table is not None:
        memory = table.stage_memory(i, j)
        # The stash entry is of the IPU's own operations, a wrapped head's left out (it stashes nothing): the
        # range's, which the table has (also at position 0 with the head; 24 ms each at 1x BERT-Large).
        entry = table.stash_entry(i, j)
    ops = range_ops(facts, i, j, with_head)  # the unlayered operations with layer 0: position 0 starts there
    return _figure(facts, layers, ops, position, plan, _at(cross, into), bytes_out, _at(back, into), memory, entry)


def _at(crossing: np.ndarray, k: int) -> int:
    """The bytes of boundary ``k`` (after layer ``k``); 0 before the first layer and past the last."""
    return int(crossing[k]) if 0 <= k < len(crossing) else 0
