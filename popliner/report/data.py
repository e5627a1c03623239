"""Gather a split's figures from the library for the plots and the HTML report.

This module is the only place the report and the tile plot ask for memory
figures, and it asks :func:`popliner.pipeline.stage_figures` (through
:meth:`Analysis.pipeline_figures`), as ``popliner check``, the solver and the
simulator do, so a split shows one figure, to the byte, everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

from popliner.analysis import Analysis
from popliner.solvers.result import StageResult, stage_result

__all__ = ["ipu_memories"]


def ipu_memories(analysis: Analysis, stages: Sequence[Sequence[str]], *, budget: int) -> list[StageResult]:
    """Each IPU of a split with its per-tile figure (``stages[i]`` = the layers on IPU i)."""
    return [stage_result(figure, analysis.layer_names, budget) for figure in analysis.pipeline_figures(stages)]
