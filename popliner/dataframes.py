"""Typed pandas frames built from plain results, for notebooks.

Kept apart from :mod:`popliner.frames` (which loads and analyses profiles)
so that a solver's result can give its own frame
(:meth:`popliner.solvers.result.SplitResult.to_frame`) without the solver
layer depending on the analysis. Columns: ``string`` for names, ``int64``
for bytes, counts and cycles.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pandas as pd

from popliner.memory.types import COMPONENTS, ComponentBytes

if TYPE_CHECKING:
    from popliner.solvers.result import SplitResult

__all__ = ["component_columns", "split_frame", "typed"]


def split_frame(split: SplitResult) -> pd.DataFrame:
    """One row per IPU of a split: layers, memory summed over tiles, worst tile, headroom, stash, cycles."""
    stages = split.stages
    budget = split.budget_bytes
    frame = pd.DataFrame({
        "ipu": [s.ipu for s in stages],
        "first_layer": [s.first_layer for s in stages],
        "last_layer": [s.last_layer for s in stages],
        "num_layers": [len(s.layers) for s in stages],
        **component_columns([s.memory for s in stages]),
        "worst_tile": [s.worst_tile for s in stages],
        "worst_tile_bytes": [s.worst_tile_bytes for s in stages],
        "headroom_bytes": [budget - s.worst_tile_bytes for s in stages],
        "stash_entries": [s.stash_entries for s in stages],
        "stash_bytes": [s.stash_bytes for s in stages],
        "cycles": [s.cycles for s in stages],
        "bytes_in": [s.bytes_in for s in stages],
        "fits": [s.fits for s in stages],
    })
    frame = typed(frame, strings=("first_layer", "last_layer"))
    frame["fits"] = frame["fits"].astype(bool)
    frame["layers"] = pd.Series([list(s.layers) for s in stages], dtype=object)
    return frame


def component_columns(memories: Sequence[ComponentBytes]) -> dict[str, list[int]]:
    """The five components and their total, one column each."""
    cols: dict[str, list[int]] = {name: [getattr(m, name) for m in memories] for name in COMPONENTS}
    cols["total"] = [m.total for m in memories]
    return cols


def typed(frame: pd.DataFrame, strings: tuple[str, ...]) -> pd.DataFrame:
    """``string`` dtype for the named columns, ``int64`` for the numeric ones (also when the frame is empty)."""
    for col in frame.columns:
        if col in strings:
            frame[col] = frame[col].astype("string")
        elif col not in ("note", "fits", "layers"):
            frame[col] = frame[col].astype("int64")
    return frame
