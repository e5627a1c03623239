"""What tells the variable tables of one profile's option sets apart (:mod:`popliner.memory.ranges_shared`).

An option set (recomputation, optimizer state, sharding) changes the live
steps or bytes of some variables of the profile; its what-if profile only
adds liveness classes. Parts made for one such table serve every option set
of an equal table.
"""

from __future__ import annotations

import numpy as np

from popliner.profile.model import Profile

__all__ = ["VariableTable", "changed_variables"]


class VariableTable:
    """What tells one variable table from another of the same profile: the class table and the changed variables.

    Both extend the same profiled table (:func:`changed_variables` checked that), so
    two with equal class tables, equal changed variables and equal classes
    and bytes of those give every variable the same live steps and bytes.
    """

    def __init__(self, parts: tuple[np.ndarray, ...]) -> None:
        self.parts = parts

    @classmethod
    def of(cls, profile: Profile, changed: np.ndarray) -> VariableTable:
        at = np.flatnonzero(changed)
        v = profile.variables
        return cls((profile.class_ptr, profile.iv_start, profile.iv_end, at, v.klass[at], v.bytes[at]))

    def same(self, other: VariableTable) -> bool:
        return all(a.shape == b.shape and np.array_equal(a, b) for a, b in zip(self.parts, other.parts))


def changed_variables(profile: Profile, base: Profile) -> np.ndarray | None:
    """Bool per variable: live steps or bytes differ from the profiled ones.

    None when the class table does not extend the profile's (then nothing is shared).
    """
    n = base.num_classes
    if profile.num_classes < n or profile.tiles != base.tiles:
        return None
    ptr = base.class_ptr
    if not (np.array_equal(profile.class_ptr[: n + 1], ptr)
            and np.array_equal(profile.iv_start[: ptr[-1]], base.iv_start)
            and np.array_equal(profile.iv_end[: ptr[-1]], base.iv_end)):
        return None
    a, b = profile.variables, base.variables
    if a.tile is not b.tile and not np.array_equal(a.tile, b.tile):
        return None
    return np.asarray((a.klass != b.klass) | (a.bytes != b.bytes))
