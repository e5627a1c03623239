"""The tables popliner reports, as plain data handed to the writers.

Builders in :mod:`popliner.analysis` fill these from a profile; the writers
(CSV/TSV, XLSX, plots) only format them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.memory.types import ComponentBytes

__all__ = ["Breakdown", "LayerMatrix", "LayerRow", "OperationRow", "TotalsRow"]


@dataclass(frozen=True)
class OperationRow:
    """One distinct operation. ``memory`` is the operation alone, summed over tiles."""

    position: int  # order of first step
    layer: str | None
    note: str  # how the layer was found, e.g. "name", "inputs", "call", "inputs-layer-0", "none"
    name: str
    first_step: int  # -1 when it runs at no step
    last_step: int
    memory: ComponentBytes


@dataclass(frozen=True)
class LayerRow:
    """One layer as a stage of its own. ``memory`` is summed over tiles."""

    layer: str
    num_operations: int
    memory: ComponentBytes
    worst_tile: int
    worst_tile_bytes: int  # the layer's total on its worst tile
    cycles: int


@dataclass(frozen=True)
class TotalsRow:
    """One memory category over the whole profile (summed over tiles).

    ``model`` is popliner's figure, ``ground_truth`` the profile's own
    ``tileMemory`` figure when present.
    """

    category: str
    model: int
    ground_truth: int | None


@dataclass(frozen=True, eq=False)
class LayerMatrix:
    """A square layer x layer matrix of bytes (affinity or interlayer traffic).

    ``sheet`` is a short name for a workbook sheet (at most 31 characters); the title says the rest.
    """

    title: str
    layers: tuple[str, ...]
    values: np.ndarray  # int64 [len(layers), len(layers)]
    sheet: str = ""


@dataclass(frozen=True)
class Breakdown:
    """Everything the review spreadsheets show for one profile."""

    profile_path: str
    tiles: int
    bytes_per_tile: int
    operations: tuple[OperationRow, ...]
    layers: tuple[LayerRow, ...]
    totals: tuple[TotalsRow, ...]
    #: The operations of no layer as a stage of their own (they go on the first IPU); None if there are none.
    unlayered: LayerRow | None = None
    #: Every operation on one IPU, counted like a stage: the model's own total, which no sum of rows gives.
    whole: LayerRow | None = None
