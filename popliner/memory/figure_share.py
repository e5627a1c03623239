"""When one option set may take another's range figure: the layers whose variables both treat alike.

A range's figure reads, besides its layers' operations and the training
rules (the signature), only what an option set makes of the layers'
variables: which of them its grids make themselves rather than take as
profiled (:meth:`popliner.memory.ranges_shared.VarSet.split`), and of
those their live intervals and bytes on each grid, and which are never
stashed. ``popliner plan`` goes through the head placements of one
recomputation and state in turn; the first to build a range state is the
group's reference (:attr:`popliner.memory.ranges_shared.SharedParts.reference`),
and each later one compares its variables with the reference's once, in
a few passes over the variable columns: a range whose layers hold no
variable treated otherwise has the reference's figure, to the byte. The
reference itself compares nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

__all__ = ["GridView", "TableView", "layers_touched"]


class GridView:
    """One grid of an option set: per variable, made on the grid (else taken as profiled), its class there and
    its bytes; per class, a number classes of equal live intervals share across option sets.

    Made on the grid: always live as profiled (``always``) or marked by the option set (``own``). The head
    placements of one recomputation and state mark the same array and read the same profile's columns: they
    are told alike by identity, with no pass over the variables, and the class numbers are worked out only
    for a comparison that reads them.
    """

    def __init__(self, always: np.ndarray, own: np.ndarray, klass: np.ndarray, class_ids: Callable[[], np.ndarray],
                 nbytes: np.ndarray) -> None:
        self.always, self.own = always, own
        self.klass = klass  # per variable, in the grid's profile
        self.nbytes = nbytes  # per variable, in the grid's profile
        self._class_ids = class_ids

    def made(self, at: slice) -> np.ndarray:
        """Bool per variable of the slice ``at``: made on the grid."""
        return np.asarray(self.always[at] | self.own[at])

    @property
    def class_ids(self) -> np.ndarray:
        """Per class of the grid's profile: the number classes of equal live intervals share."""
        return self._class_ids()

    def made_alike(self, other: GridView) -> bool:
        """Are the made flags the same array's (then equal, unread)?"""
        return self.always is other.always and self.own is other.own


@dataclass(frozen=True, eq=False)
class TableView:
    """What an option set's range figures read of its variables, and its training rules (``signature``)."""

    signature: tuple[object, ...]
    grids: tuple[GridView, ...]  # the main grid, then the forward-cut grid under pipeline recomputation
    never_stash: np.ndarray | None  # bool per variable, in training
    profiled_classes: int  # the loaded profile's classes: every grid's profile numbers them the same

    def differs(self, reference: TableView) -> np.ndarray | None:
        """Bool per variable: treated otherwise than by ``reference``; None when the rules differ (nothing shared).

        Columns that are the reference's own arrays are equal and not read. The others are compared a slice of
        variables at a time, so that the flags made on the way stay in the cache (some ten passes over 18 M
        variables at 120 BERT-Large layers otherwise).
        """
        if self.signature != reference.signature or len(self.grids) != len(reference.grids) or (
                (self.never_stash is None) != (reference.never_stash is None)):
            return None
        size = self.grids[0].klass.size
        out = np.zeros(size, bool)
        for start in range(0, size, _SLICE):
            at = slice(start, min(start + _SLICE, size))
            self._differs_in(reference, at, out[at])
        return out

    def _differs_in(self, reference: TableView, at: slice, out: np.ndarray) -> None:
        """:meth:`differs` over the variables ``at``, or-ed into ``out`` (theirs)."""
        for mine, theirs in zip(self.grids, reference.grids):
            alike = mine.made_alike(theirs)
            if alike and mine.nbytes is theirs.nbytes and mine.klass is theirs.klass:
                continue
            both = mine.made(at)
            if not alike:
                made = theirs.made(at)
                out |= both != made
                both &= made
            if mine.nbytes is not theirs.nbytes:
                out |= both & (mine.nbytes[at] != theirs.nbytes[at])
            if mine.klass is not theirs.klass:
                # A class below the profile's count is the profile's in every grid's profile (their tables extend
                # it); the others are numbered per profile, so their intervals are compared by their ids.
                klass, other = mine.klass[at], theirs.klass[at]
                pick = np.flatnonzero(both & ((klass != other) | (klass >= self.profiled_classes)))
                out[pick] |= mine.class_ids[klass[pick]] != theirs.class_ids[other[pick]]
        never, theirs_never = self.never_stash, reference.never_stash
        if never is not None and theirs_never is not None and never is not theirs_never:
            out |= self.grids[0].made(at) & (never[at] != theirs_never[at])


#: Variables per slice of :meth:`TableView.differs`.
_SLICE = 1 << 16


def layers_touched(flags: np.ndarray, starts: np.ndarray, lengths: np.ndarray, ptr: np.ndarray,
                   shared: list[np.ndarray]) -> np.ndarray:
    """Bool per layer: does it hold a flagged variable?

    ``starts``, ``lengths``: the runs of the layers' private variables, layer ``j``'s at ``ptr[j]:ptr[j + 1]``
    (:class:`popliner.memory.layer_vars.LayerVariables`); ``shared[j]``: layer ``j``'s shared variables.
    """
    at = np.flatnonzero(flags)
    # Flagged variables in each run: those before its end less those before its start.
    per_run = np.searchsorted(at, starts + lengths) - np.searchsorted(at, starts)
    before = np.concatenate(([0], np.cumsum(per_run)))
    out = before[ptr[1:]] > before[ptr[:-1]]
    for j, var in enumerate(shared):
        out[j] = out[j] or bool(flags[var].any())
    return np.asarray(out, bool)
