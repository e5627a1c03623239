"""Gather a split's figures from the library into plain values for the plots and the HTML report.

This module is the only place the report and the tile plot ask the memory
engine for numbers, through the same functions ``popliner check`` uses, so a
split shows one figure everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.analysis import Analysis
from popliner.check import ipu_memory_per_tile
from popliner.report.types import IpuMemory

__all__ = ["ipu_memories"]


def ipu_memories(analysis: Analysis, stages: Sequence[Sequence[str]], *, budget: int) -> list[IpuMemory]:
    """Per-tile memory of each IPU of a split (``stages[i]`` = the layers on IPU i)."""
    training = analysis.mode == "training"
    out = []
    for position, layers in enumerate(stages):
        per_tile, stash = ipu_memory_per_tile(analysis, layers, position, len(stages), training)
        out.append(IpuMemory(
            ipu=position, layers=tuple(layers), per_tile=np.asarray(per_tile, dtype=np.int64),
            stash_per_tile=np.asarray(stash, dtype=np.int64),
            copy_per_tile=np.zeros(per_tile.shape[1], dtype=np.int64), budget=budget,
        ))
    return out
