"""Liveness: the most variable bytes live at once, per tile, over a window of steps.

Three forms of the same figure, each for its own caller:

- :mod:`.sweep`: one-shot peaks of a fixed set of variables (a stage, every
  operation alone, every layer alone), by one sort of clipped interval events;
- :mod:`.grid` and :mod:`.events`: the two running back-ends of the range
  tables (:mod:`popliner.memory.running`), which add variables to a growing
  set and read its peak over any window. The grid costs the same whatever
  the set's size, so it is taken when it is small; the sorted event list
  otherwise.
"""

from popliner.memory.liveness.events import EventList
from popliner.memory.liveness.grid import SegmentGrid
from popliner.memory.liveness.sweep import class_steps, group_peak_totals, group_peaks, variable_steps, window_peak

__all__ = ["EventList", "SegmentGrid", "class_steps", "group_peak_totals", "group_peaks", "variable_steps",
           "window_peak"]
