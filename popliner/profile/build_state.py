"""What the profile builder knows while it builds: the checks, and the id tables the sections share.

:class:`popliner.profile.builder.Builder` drives the build; the sections it
hands out (:mod:`popliner.profile.programs`, :mod:`popliner.profile.varcols`)
read and fill this state, and so depend on it alone, not on the builder.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from popliner.profile.columns import Extracted
from popliner.profile.rules import Checker

__all__ = ["BuildState", "VarIndex"]


@dataclass
class VarIndex:
    """How variable ids become positions (ids 0..n-1 in order, the usual numbering, need no work)."""

    order: np.ndarray  # argsort of the ids
    sorted_ids: np.ndarray  # empty when dense
    dense: bool  # the ids are exactly 0..n-1
    in_order: bool  # ... and in that order


class BuildState(Checker):
    """The checks, the column reader's arrays (``extracted``), and the ids seen so far, by section."""

    def __init__(self, path: str, extracted: Extracted | None = None) -> None:
        super().__init__(path)
        self.extracted = extracted
        self.tiles = 0
        self.num_steps = 0
        self.ctx_index: dict[int, int] = {}
        self.prog_index: dict[int, int] = {}
        self.var_index = VarIndex(np.zeros(0, np.int64), np.zeros(0, np.int64), True, True)

    def index_of(self, ids: np.ndarray, section: str, what: str) -> dict[int, int]:
        index: dict[int, int] = {}
        for i, v in enumerate(ids.tolist()):
            if v in index:
                self.fail(f"{section}[{i}].id", f"{what} id {v} is used twice (also at {section}[{index[v]}])")
            index[v] = i
        return index
