"""Plain values the report and the plots are drawn from (no profile, no engine inside)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.memory.types import ComponentBytes
from popliner.pipeline import StageFigure

__all__ = ["IpuMemory"]


@dataclass(frozen=True, eq=False)
class IpuMemory:
    """One IPU of a split as the report and the plots show it.

    Every byte is its pipeline figure's (:class:`popliner.pipeline.StageFigure`,
    the one ``popliner check`` and the solver report); this adds only what
    a page needs beside it: the layer names and the budget.
    """

    figure: StageFigure
    layers: tuple[str, ...]
    budget: int

    @property
    def ipu(self) -> int:
        return self.figure.position

    @property
    def tiles(self) -> int:
        return self.figure.memory.tiles

    @property
    def per_tile(self) -> np.ndarray:
        """(5, tiles), or (6, tiles) with other categories, in component order.

        The model of the IPU's operations (one stash entry included).
        """
        return self.figure.memory.per_tile

    @property
    def stash_per_tile(self) -> np.ndarray:
        """What the pipeline's extra stash entries add, per tile."""
        return self.figure.stash_per_tile

    @property
    def copy_per_tile(self) -> np.ndarray:
        """The inter-IPU copy buffers, the same on every tile."""
        return np.full(self.tiles, self.figure.copy_buffer, np.int64)

    @property
    def total_per_tile(self) -> np.ndarray:
        return self.figure.total_per_tile

    @property
    def worst_tile(self) -> int:
        return self.figure.worst_tile

    @property
    def worst_bytes(self) -> int:
        return self.figure.worst_bytes

    @property
    def worst_components(self) -> dict[str, int]:
        """Bytes on the worst tile: the five components (six with other categories), then stash and copy buffers."""
        out = self.figure.worst_tile_memory.as_dict(self.figure.memory.has_other)
        out["stash"] = self.figure.worst_tile_stash
        out["copy_buffers"] = self.figure.copy_buffer if self.tiles else 0
        return out

    @property
    def summed(self) -> ComponentBytes:
        """Each component summed over tiles (stash and buffers not included)."""
        return self.figure.memory.summed()

    @property
    def headroom(self) -> int:
        """Bytes left on the worst tile (negative when over budget)."""
        return self.budget - self.worst_bytes

    @property
    def fits(self) -> bool:
        return self.figure.fits(self.budget)

    @property
    def label(self) -> str:
        if not self.layers:
            return f"IPU {self.ipu} (empty)"
        span = self.layers[0] if len(self.layers) == 1 else f"{self.layers[0]} .. {self.layers[-1]}"
        return f"IPU {self.ipu}: {span}"
