"""Gather a split's figures from the library for the plots and the HTML report.

This module is the only place the report and the tile plot ask for memory
figures, and it asks :func:`popliner.pipeline.stage_figures` (through
:meth:`Analysis.pipeline_figures`), as ``popliner check``, the solver and the
simulator do, so a split shows one figure, to the byte, everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from popliner.analysis import Analysis
from popliner.report.types import IpuMemory

__all__ = ["ipu_memories"]


def ipu_memories(analysis: Analysis, stages: Sequence[Sequence[str]], *, budget: int) -> list[IpuMemory]:
    """Per-tile memory of each IPU of a split (``stages[i]`` = the layers on IPU i)."""
    figures = analysis.pipeline_figures(stages)
    return [IpuMemory(figure, tuple(layers), budget) for figure, layers in zip(figures, stages)]
