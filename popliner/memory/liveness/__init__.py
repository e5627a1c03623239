"""Liveness: the most variable bytes live at once, per tile, over a window of steps.

Two forms of the same figure, each for its own caller:

- :mod:`.sweep`: one-shot peaks of a fixed set of variables (a stage, every
  operation alone, every layer alone), by one sort of clipped interval events;
- :mod:`.grid`: the running liveness of the range tables
  (:mod:`popliner.memory.running`), which adds variables to a growing set and
  reads its peak over any window, at a cost that does not grow with the set.
"""

from popliner.memory.liveness.grid import SegmentGrid
from popliner.memory.liveness.sweep import class_steps, group_peak_totals, group_peaks, variable_steps, window_peak

__all__ = ["SegmentGrid", "class_steps", "group_peak_totals", "group_peaks", "variable_steps",
           "window_peak"]
