"""Plain result types of the memory model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["COMPONENTS", "COMPONENT_COLOURS", "COMPONENT_TITLES", "OTHER", "ComponentBytes", "StageMemory",
           "components"]

#: The five parts of a stage's per-tile memory, in report order.
COMPONENTS: tuple[str, ...] = ("variables", "vertex_code", "vertex_state", "exchange_code", "control_code")
COMPONENT_TITLES: dict[str, str] = {
    "variables": "Variables",
    "vertex_code": "Vertex code",
    "vertex_state": "Vertex state",
    "exchange_code": "Exchange code",
    "control_code": "Control code",
    "other": "Other categories",
}
#: One fixed colour per component (matplotlib's tab10), so that every plot and the HTML report agree.
COMPONENT_COLOURS: dict[str, str] = {
    "variables": "#1f77b4",
    "vertex_code": "#ff7f0e",
    "vertex_state": "#2ca02c",
    "exchange_code": "#9467bd",
    "control_code": "#8c564b",
    "other": "#7f7f7f",
}
#: The sixth component: the compiler's categories the five leave out (:mod:`popliner.memory.categories`).
#: Only a profile whose ``tileMemory`` has such categories has it; every view then shows it after the five.
OTHER = "other"


def components(with_other: bool) -> tuple[str, ...]:
    """The components a view shows: the five, and ``other`` when the profile has it."""
    return (*COMPONENTS, OTHER) if with_other else COMPONENTS


@dataclass(frozen=True)
class ComponentBytes:
    """Bytes per memory component (summed over tiles, or on one tile)."""

    variables: int = 0
    vertex_code: int = 0
    vertex_state: int = 0
    exchange_code: int = 0
    control_code: int = 0
    other: int = 0  # the compiler's other categories (0 for a profile without them)

    @property
    def total(self) -> int:
        return (self.variables + self.vertex_code + self.vertex_state + self.exchange_code + self.control_code
                + self.other)

    def as_tuple(self, with_other: bool = False) -> tuple[int, ...]:
        five = (self.variables, self.vertex_code, self.vertex_state, self.exchange_code, self.control_code)
        return (*five, self.other) if with_other else five

    def as_dict(self, with_other: bool | None = None) -> dict[str, int]:
        """The components by name; ``other`` only when asked, or (by default) when it is not 0."""
        show = self.other != 0 if with_other is None else with_other
        return dict(zip(components(show), self.as_tuple(show)))


@dataclass(frozen=True, eq=False)
class StageMemory:
    """Per-tile memory of a set of operations on one IPU.

    ``per_tile`` has shape (5, tiles), rows in :data:`COMPONENTS` order, or
    (6, tiles) with the :data:`OTHER` row last when the profile has other categories.
    """

    per_tile: np.ndarray

    @property
    def has_other(self) -> bool:
        return int(self.per_tile.shape[0]) > len(COMPONENTS)

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
