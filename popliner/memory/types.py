"""Plain result types of the memory model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COMPONENTS", "COMPONENT_TITLES", "ComponentBytes", "StageMemory"]

#: The five parts of a stage's per-tile memory, in report order.
COMPONENTS: tuple[str, ...] = ("variables", "vertex_code", "vertex_state", "exchange_code", "control_code")
COMPONENT_TITLES: dict[str, str] = {
    "variables": "Variables",
    "vertex_code": "Vertex code",
    "vertex_state": "Vertex state",
    "exchange_code": "Exchange code",
    "control_code": "Control code",
}


@dataclass(frozen=True)
class ComponentBytes:
    """Bytes per memory component (summed over tiles, or on one tile)."""

    variables: int = 0
    vertex_code: int = 0
    vertex_state: int = 0
    exchange_code: int = 0
    control_code: int = 0

    @property
    def total(self) -> int:
        return self.variables + self.vertex_code + self.vertex_state + self.exchange_code + self.control_code

    def as_tuple(self) -> tuple[int, int, int, int, int]:
        return (self.variables, self.vertex_code, self.vertex_state, self.exchange_code, self.control_code)

    def as_dict(self) -> dict[str, int]:
        return dict(zip(COMPONENTS, self.as_tuple()))


@dataclass(frozen=True, eq=False)
class StageMemory:
    """Per-tile memory of a set of operations on one IPU.

    ``per_tile`` has shape (5, tiles), rows in :data:`COMPONENTS` order.
    """

    per_tile: np.ndarray

    @property
    def tiles(self) -> int:
        return int(self.per_tile.shape[1])

    @property
    def total_per_tile(self) -> np.ndarray:
        return np.asarray(self.per_tile.sum(axis=0))

    @property
    def worst_tile(self) -> int:
        """Index of the tile with the largest total (lowest index on ties)."""
        return int(np.argmax(self.total_per_tile)) if self.tiles else 0

    @property
    def worst_bytes(self) -> int:
        return int(self.total_per_tile.max()) if self.tiles else 0

    def summed(self) -> ComponentBytes:
        """Each component summed over tiles."""
        return ComponentBytes(*(int(v) for v in self.per_tile.sum(axis=1)))

    def on_tile(self, tile: int) -> ComponentBytes:
        return ComponentBytes(*(int(v) for v in self.per_tile[:, tile]))

    def fits(self, budget: int) -> bool:
        return self.worst_bytes <= budget
