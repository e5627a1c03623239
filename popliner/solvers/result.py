"""The result every solver returns: plain frozen dataclasses."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from popliner.memory.overflow import OverflowDetail
from popliner.memory.types import ComponentBytes
from popliner.pipeline import StageFigure

__all__ = ["SplitResult", "StageResult", "stage_result"]


@dataclass(frozen=True)
class StageResult:
    """One pipeline stage = the layers placed on one IPU.

    ``memory`` is each component summed over tiles (without stash);
    ``worst_tile``/``worst_tile_bytes`` are the tile with the largest total,
    stash and copy buffers included (:mod:`popliner.pipeline`);
    ``stash_entries`` is the stash depth PopART keeps on the IPU and
    ``stash_bytes`` what the stash adds to the single-IPU profile: ``depth - 1``
    entries (the profile already holds one), **summed over tiles**;
    ``worst_tile_stash`` is that stash on the worst tile, ``copy_buffer`` the
    copy buffers per tile (the same on every tile); ``bytes_in``/``bytes_out``
    cross the IPU's boundaries per micro-batch.
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
    fits: bool
    overflow: OverflowDetail | None = None  # for a stage that does not fit: where and why
    worst_tile_stash: int = 0
    copy_buffer: int = 0
    bytes_out: int = 0

    #: The per-tile figures behind the numbers (the tile plot draws them); not part of equality.
    figure: StageFigure | None = field(default=None, compare=False, repr=False)

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
    status: str  # "OPTIMAL", "FEASIBLE", "GREEDY" or "INFEASIBLE" (stages then hold a best-effort split)
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
            "headroom_bytes": [self.budget_bytes - s.worst_tile_bytes for s in stages],
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


def stage_result(figure: StageFigure, layer_names: tuple[str, ...], budget: int,
                 overflow: OverflowDetail | None = None) -> StageResult:
    """The result of one stage from its pipeline figure (IPU = position)."""
    return StageResult(
        index=figure.position, ipu=figure.position, layers=tuple(layer_names[k] for k in figure.layers),
        memory=figure.memory.summed(), worst_tile=figure.worst_tile, worst_tile_bytes=figure.worst_bytes,
        stash_bytes=figure.stash_bytes_summed, stash_entries=figure.stash_entries, cycles=figure.cycles,
        bytes_in=figure.bytes_in, fits=figure.fits(budget), overflow=overflow, worst_tile_stash=figure.worst_tile_stash,
        copy_buffer=figure.copy_buffer, bytes_out=figure.bytes_out, figure=figure,
    )
