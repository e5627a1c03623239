"""Gather a split's figures from the library into plain values for the plots and the HTML report.

This module is the only place the report and the tile plot ask for memory
figures, and it asks :func:`popliner.pipeline.stage_figures` (through
:meth:`Analysis.pipeline_figures`), as ``popliner check``, the solver and the
simulator do, so a split shows one figure, to the byte, everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from popliner.analysis import Analysis
from popliner.pipeline import StageFigure
from popliner.report.types import IpuMemory

__all__ = ["ipu_memories", "ipu_memory"]


def ipu_memory(figure: StageFigure, layers: Sequence[str], budget: int) -> IpuMemory:
    """One IPU's per-tile figure split into model, stash and copy buffers.

    The copy buffers are whatever the pipeline rules add on top of the model
    and the stash, so the total is the rules' total whether or not they count
    copy buffers yet.
    """
    per_tile = np.asarray(figure.memory.per_tile, dtype=np.int64)
    stash = np.asarray(figure.stash_per_tile, dtype=np.int64)
    total = np.asarray(figure.total_per_tile, dtype=np.int64)
    copy = total - per_tile.sum(axis=0) - stash
    return IpuMemory(ipu=figure.position, layers=tuple(layers), per_tile=per_tile, stash_per_tile=stash,
                     copy_per_tile=copy, budget=budget)


def ipu_memories(analysis: Analysis, stages: Sequence[Sequence[str]], *, budget: int) -> list[IpuMemory]:
    """Per-tile memory of each IPU of a split (``stages[i]`` = the layers on IPU i)."""
    figures = analysis.pipeline_figures(stages)
    return [ipu_memory(figure, layers, budget) for figure, layers in zip(figures, stages)]
