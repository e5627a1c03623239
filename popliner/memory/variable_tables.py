"""What tells the variable tables of one profile's option sets apart (:mod:`popliner.memory.ranges_shared`).

An option set (recomputation, optimizer state, sharding) changes the live
steps or bytes of some variables of the profile; its what-if profile only
adds liveness classes. Parts made for one such table serve every option set
of an equal table.
"""

from __future__ import annotations

import numpy as np

from popliner.profile.model import Profile

__all__ = ["changed_variables"]


def changed_variables(profile: Profile, base: Profile, changed: np.ndarray) -> np.ndarray | None:
    """Bool per variable: live steps or bytes differ from the profiled ones, as the maker of ``profile`` flagged them
    (``changed``: :attr:`popliner.memory.whatif.Delta.changed`).

    None when the class table does not extend the profile's (then nothing is shared): a variable whose class and
    bytes are as profiled then has the profiled live steps too.
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
    return changed
