"""Pipeline recomputation in a range table: the forward window's liveness of a running set, grown with it.

The running set's own liveness grid answers a re-run range's backward window;
:class:`ForwardCut` holds the same variables under the forward-cut profile's
live steps, added layer by layer, for its forward window (docs/solvers.md,
'The range table'; the direct figure took about 40 ms a range at 1x BERT-Large).

The forward-cut profiles are the what-if profile with classes appended
(:func:`popliner.memory.whatif.with_live_steps`), so a variable that keeps its
live steps (a wrapped head's, on IPU 0) is added with its what-if class,
which indexes the same class table: the figure of the facts' head-kept
profile, without a third liveness back-end.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from popliner.memory.liveness import SegmentGrid
from popliner.memory.liveness.grid import BLOCK

if TYPE_CHECKING:
    from popliner.memory.facts import MemoryFacts

__all__ = ["ForwardCut", "forward_cut_grid"]


def forward_cut_grid(facts: MemoryFacts, dtype: type[np.signedinteger] | None = None, block: int = BLOCK,
                     buffers: bool = True) -> SegmentGrid:
    """The liveness grid of the facts' forward-cut profile (its segments refine the what-if profile's).

    ``dtype``: the what-if grid's cells, when known (the cut profile has the same variables' bytes);
    ``buffers``: as :meth:`SegmentGrid.of`'s.
    """
    return SegmentGrid.of(facts.forward_cut_profile(), block, dtype, buffers)


class ForwardCut:
    """A running set's variables under the forward-cut profile's live steps, on a shared grid.

    ``grid`` is the range state's forward-cut grid (:func:`forward_cut_grid`),
    shared by every running set of the scenario one at a time, as the what-if
    grid is: a new set clears it, and :meth:`restore` puts this set's
    variables back after another set used it.
    """

    def __init__(self, facts: MemoryFacts, grid: SegmentGrid) -> None:
        cut = facts.forward_cut_profile()
        # The what-if classes, valid in the forward-cut profile's class table (it only appends classes).
        self.kept_klass = facts.profile.variables.klass
        if len(cut.class_ptr) < len(facts.profile.class_ptr):  # pragma: no cover - with_live_steps only appends
            raise AssertionError("the forward-cut profile does not extend the what-if profile's classes")
        self.grid = grid
        #: What went into the shared grid, to put the set back after other sets used it.
        self.adds: list[dict[str, np.ndarray]] = []
        grid.clear()
        self._token = object()  # the grid's holder, by a token: no reference cycle (RunningStage)
        grid.owner = self._token

    @property
    def holds_grid(self) -> bool:
        """Does the shared grid hold this set's variables (no other set cleared it since)?"""
        return self.grid.owner is self._token

    def restore(self) -> None:
        """Make the shared grid hold this set's variables again."""
        self.grid.clear()
        self.grid.owner = self._token
        for events in self.adds:
            self.grid.add(events)

    def add(self, private_events: tuple[dict[str, np.ndarray], ...] | None,
            shared_events: tuple[dict[str, np.ndarray], ...] | None, var: np.ndarray | None, kept: bool) -> None:
        """Add a layer's new variables: their forward-cut events (``*_events``).

        ``kept``: the variables keep their what-if live steps (a wrapped
        head's on IPU 0); their events are then made here, once, from ``var``
        (the new variables, sorted; None when not ``kept``).
        """
        if kept:
            assert var is not None
            added: tuple[dict[str, np.ndarray], ...] = (self.grid.events_of(var, klass=self.kept_klass),)
        else:
            assert private_events is not None and shared_events is not None
            added = (*private_events, *shared_events)
        for events in added:
            self.grid.add(events)
        self.adds.extend(added)

    def peak(self, lo: int, hi: int) -> np.ndarray:
        """Per tile, the most forward-cut bytes of the set's variables live at any step ``lo..hi``."""
        return self.grid.peak(lo, hi)
