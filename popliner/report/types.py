"""Plain values the report and the plots are drawn from (no profile, no engine inside)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.memory.types import COMPONENTS, ComponentBytes

__all__ = ["IpuMemory"]


@dataclass(frozen=True, eq=False)
class IpuMemory:
    """One IPU of a split, per tile: what the memory engine says it holds.

    ``per_tile`` is (5, tiles) in :data:`COMPONENTS` order, the stage's own
    memory as the single-IPU profile shows it (one stash entry included);
    ``stash_per_tile`` is what the pipeline's extra stash entries add and
    ``copy_per_tile`` the inter-IPU copy buffers. The total is their sum.
    """

    ipu: int
    layers: tuple[str, ...]
    per_tile: np.ndarray
    stash_per_tile: np.ndarray
    copy_per_tile: np.ndarray
    budget: int

    @property
    def tiles(self) -> int:
        return int(self.per_tile.shape[1])

    @property
    def total_per_tile(self) -> np.ndarray:
        return np.asarray(self.per_tile.sum(axis=0) + self.stash_per_tile + self.copy_per_tile, dtype=np.int64)

    @property
    def worst_tile(self) -> int:
        """The tile with the largest total (lowest index on ties)."""
        return int(np.argmax(self.total_per_tile)) if self.tiles else 0

    @property
    def worst_bytes(self) -> int:
        return int(self.total_per_tile.max()) if self.tiles else 0

    @property
    def worst_components(self) -> dict[str, int]:
        """Bytes on the worst tile: the five components, then stash and copy buffers."""
        t = self.worst_tile
        out = {c: int(self.per_tile[k, t]) for k, c in enumerate(COMPONENTS)}
        out["stash"] = int(self.stash_per_tile[t])
        out["copy_buffers"] = int(self.copy_per_tile[t])
        return out

    @property
    def summed(self) -> ComponentBytes:
        """Each component summed over tiles (stash and buffers not included)."""
        return ComponentBytes(*(int(v) for v in self.per_tile.sum(axis=1)))

    @property
    def headroom(self) -> int:
        """Bytes left on the worst tile (negative when over budget)."""
        return self.budget - self.worst_bytes

    @property
    def fits(self) -> bool:
        return self.worst_bytes <= self.budget

    @property
    def label(self) -> str:
        if not self.layers:
            return f"IPU {self.ipu} (empty)"
        span = self.layers[0] if len(self.layers) == 1 else f"{self.layers[0]} .. {self.layers[-1]}"
        return f"IPU {self.ipu}: {span}"
