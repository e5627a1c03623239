"""The tables popliner reports, as plain data handed to the writers.

Builders in :mod:`popliner.analysis` fill these from a profile; the writers
(CSV/TSV, XLSX, plots) only format them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.config.model import ConfigTraining
from popliner.memory.types import ComponentBytes

__all__ = ["Breakdown", "LayerMatrix", "LayerRow", "OperationRow", "RangeTable", "TotalsRow"]


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


@dataclass(frozen=True, eq=False)
class RangeTable:
    """The exact worst-tile figure of every contiguous layer range, as the planner looks it up.

    ``values[i, j, d]`` is popliner's figure (the pipeline rules of
    :mod:`popliner.pipeline`: the model of the range's operations, with the
    operations of no layer when ``i == 0``, the stash entries of an IPU that
    has ``d`` IPUs after it, and the copy buffers of its two boundaries) for
    layers ``i..j`` on an IPU with ``d`` IPUs after it; -1 where no contiguous
    split over at most ``max_ipus`` IPUs puts that range at that depth. In
    inference the figure does not depend on ``d`` and there is one column.
    """

    layers: tuple[str, ...]
    training: bool
    max_ipus: int
    values: np.ndarray  # int64 [layers, layers, depths]

    @property
    def depths(self) -> int:
        return int(self.values.shape[2]) if self.values.ndim == 3 else 0


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
    #: The exact figure of every contiguous layer range, for the planner (None: estimates only).
    ranges: RangeTable | None = None
    mode: str = ""  # "training" or "inference", as the figures were computed
    profile_sha256: str = ""
    #: The training options the figures were computed with (None in inference).
    training: ConfigTraining | None = None
    #: The profile has compiler categories the five components leave out: every table shows the sixth.
    has_other: bool = False
