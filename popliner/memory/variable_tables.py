"""What tells the variable tables of one profile's option sets apart (:mod:`popliner.memory.ranges_shared`).

An option set (recomputation, optimizer state, sharding) changes the live
steps or bytes of some variables of the profile; its what-if profile only
adds liveness classes. Parts made for one such table serve every option set
of an equal table.
"""

from __future__ import annotations

import numpy as np

from popliner.arrays import content_key
from popliner.profile.model import Profile

__all__ = ["changed_variables", "table_key"]


def table_key(profile: Profile, changed: np.ndarray, base: Profile) -> bytes:
    """What tells one variable table from another of the same profile (``base``): a digest of the class table and
    the changed variables (their flags, eight to a byte), classes and bytes (a marker for the bytes when they are
    the profiled array).

    Every such table extends the same profiled one (:func:`changed_variables` checked that), so two of
    equal keys give every variable the same live steps and bytes. A digest, not the arrays: a plan meets a
    dozen tables of millions of changed variables each (a bit per variable to digest, where their indices
    took eight bytes per changed one).
    """
    v = profile.variables
    nbytes = b"bytes as profiled" if v.bytes is base.variables.bytes else v.bytes[changed]
    return content_key(b"table", profile.class_ptr, profile.iv_start, profile.iv_end,
                       np.array([changed.size]), np.packbits(changed), v.klass[changed], nbytes)


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
    changed = np.asarray(a.klass != b.klass)
    if a.bytes is not b.bytes:  # the what-if profiles keep the profiled bytes unless sharded: no pass then
        changed |= a.bytes != b.bytes
    return changed
