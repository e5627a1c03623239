"""The result every solver returns: plain frozen dataclasses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from popliner.memory.overflow import LiveVariable, OverflowDetail
from popliner.memory.types import ComponentBytes
from popliner.pipeline import StageFigure

__all__ = ["TIMEOUT", "SplitResult", "StageResult", "stage_result"]

#: The status of a solve whose time ran out before it found any split: nothing was proved, so it is never
#: reported as INFEASIBLE ("does not fit"); the stages, if any, are a best effort.
TIMEOUT = "TIMEOUT"


@dataclass(frozen=True)
class StageResult:
    """One pipeline stage = the layers placed on one IPU: its figures are those of the ``--solve`` JSON
    (docs/solvers.md, 'Output'; ``budget``: the per-tile budget it is held against).

    It is the one record of an IPU of a split, whoever places it (a solver,
    ``popliner check``, the report): :func:`stage_result` builds it from the
    IPU's :class:`~popliner.pipeline.StageFigure`, and :attr:`headroom` is
    the one place the bytes left to the budget are worked out.
    """

    index: int
    ipu: int
    layers: tuple[str, ...]
    memory: ComponentBytes
    worst_tile: int
    worst_tile_bytes: int
    stash_bytes: int
    stash_entries: int
    cycles: int
    bytes_in: int
    budget: int
    overflow: OverflowDetail | None = None  # for a stage that does not fit: where and why
    worst_tile_stash: int = 0
    copy_buffer: int = 0
    bytes_out: int = 0

    #: The per-tile figures behind the numbers (the tile plot draws them); not part of equality.
    figure: StageFigure | None = field(default=None, compare=False, repr=False)

    @property
    def headroom(self) -> int:
        """Bytes left to the budget on the worst tile (negative when over it): the one rule."""
        return self.budget - self.worst_tile_bytes

    @property
    def headroom_share(self) -> float:
        """:attr:`headroom` as a fraction of the budget (0 without a budget)."""
        return self.headroom / self.budget if self.budget else 0.0

    @property
    def fits(self) -> bool:
        return self.headroom >= 0

    @property
    def peak_step(self) -> int:
        """For a stage over budget: the step where its variables peak on the worst tile; else -1."""
        return self.overflow.step if self.overflow is not None else -1

    @property
    def largest_live(self) -> tuple[LiveVariable, ...]:
        """For a stage over budget: the largest variables live at :attr:`peak_step`."""
        return self.overflow.largest_live if self.overflow is not None else ()

    # -- per tile: from the figure (a result built by :func:`stage_result` has one) --

    @property
    def tile_figure(self) -> StageFigure:
        """The per-tile figure behind the numbers."""
        if self.figure is None:
            raise ValueError(f"IPU {self.ipu}: this result was given as numbers, without its per-tile figure")
        return self.figure

    @property
    def tiles(self) -> int:
        return self.tile_figure.memory.tiles

    @property
    def total_per_tile(self) -> np.ndarray:
        """Model, stash and copy buffers on each tile."""
        return self.tile_figure.total_per_tile

    @property
    def stash_per_tile(self) -> np.ndarray:
        """What the pipeline's extra stash entries add, per tile."""
        return self.tile_figure.stash_per_tile

    @property
    def copy_per_tile(self) -> np.ndarray:
        """The inter-IPU copy buffers, the same on every tile."""
        return np.full(self.tiles, self.copy_buffer, np.int64)

    @property
    def worst_tile_memory(self) -> ComponentBytes:
        """The model's components on the worst tile (stash and copy buffers not included)."""
        return self.tile_figure.worst_tile_memory

    @property
    def worst_components(self) -> dict[str, int]:
        """Bytes on the worst tile: the five components (six with other categories), then stash and copy buffers."""
        out = self.worst_tile_memory.as_dict(self.tile_figure.memory.has_other)
        out["stash"] = self.worst_tile_stash
        out["copy_buffers"] = self.copy_buffer if self.tiles else 0
        return out

    @property
    def label(self) -> str:
        """``IPU k: first .. last`` (``IPU k (empty)``)."""
        if not self.layers:
            return f"IPU {self.ipu} (empty)"
        span = self.layers[0] if len(self.layers) == 1 else f"{self.layers[0]} .. {self.layers[-1]}"
        return f"IPU {self.ipu}: {span}"

    @property
    def first_layer(self) -> str | None:
        return self.layers[0] if self.layers else None

    @property
    def last_layer(self) -> str | None:
        return self.layers[-1] if self.layers else None


@dataclass(frozen=True)
class SplitResult:
    """A split of the layers over IPUs, as a solver found it."""

    solver: str  # "greedy" or "ilp"
    status: str  # "OPTIMAL", "FEASIBLE", "GREEDY", "INFEASIBLE" or TIMEOUT (the last two: a best-effort split)
    mode: str  # "inference" or "training"
    num_ipus_requested: int
    budget_bytes: int  # per-tile budget the split was solved against
    stages: tuple[StageResult, ...]
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    wall_seconds: float = 0.0
    note: str = ""

    @property
    def num_ipus_used(self) -> int:
        return len(self.stages)

    @property
    def ipu_of_layer(self) -> dict[str, int]:
        return {layer: s.ipu for s in self.stages for layer in s.layers}

    @property
    def fits(self) -> bool:
        return bool(self.stages) and all(s.fits for s in self.stages)

    def to_frame(self) -> Any:
        """One row per IPU as a pandas DataFrame: layers, memory summed over tiles, worst tile, headroom, stash,
        cycles."""
        # Imported here, so that importing a solver does not import pandas.
        import pandas as pd

        from popliner.dataframes import component_columns, typed

        stages = self.stages
        frame = pd.DataFrame({
            "ipu": [s.ipu for s in stages],
            "first_layer": [s.first_layer for s in stages],
            "last_layer": [s.last_layer for s in stages],
            "num_layers": [len(s.layers) for s in stages],
            **component_columns([s.memory for s in stages]),
            "worst_tile": [s.worst_tile for s in stages],
            "worst_tile_bytes": [s.worst_tile_bytes for s in stages],
            "headroom_bytes": [s.headroom for s in stages],
            "stash_entries": [s.stash_entries for s in stages],
            "stash_bytes": [s.stash_bytes for s in stages],
            "cycles": [s.cycles for s in stages],
            "bytes_in": [s.bytes_in for s in stages],
            "fits": [s.fits for s in stages],
        })
        frame = typed(frame, strings=("first_layer", "last_layer"))
        frame["fits"] = frame["fits"].astype(bool)
        frame["layers"] = pd.Series([list(s.layers) for s in stages], dtype=object)
        return frame


def stage_result(figure: StageFigure, layer_names: Sequence[str], budget: int,
                 overflow: OverflowDetail | None = None) -> StageResult:
    """The result of one stage from its pipeline figure (IPU = position): the one way a figure becomes a record."""
    stash = figure.stash_per_tile  # summed over tiles, and on the worst tile
    return StageResult(
        index=figure.position, ipu=figure.position, layers=tuple(layer_names[k] for k in figure.layers),
        memory=figure.memory.summed(), worst_tile=figure.worst_tile, worst_tile_bytes=figure.worst_bytes,
        stash_bytes=int(stash.sum()), stash_entries=figure.stash_entries, cycles=figure.cycles,
        bytes_in=figure.bytes_in, budget=budget, overflow=overflow,
        worst_tile_stash=int(stash[figure.worst_tile]) if figure.memory.tiles else 0,
        copy_buffer=figure.copy_buffer, bytes_out=figure.bytes_out, figure=figure,
    )
