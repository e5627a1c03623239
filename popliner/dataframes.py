"""Typed pandas columns, shared by the notebook frames.

Kept apart from :mod:`popliner.frames` (which loads and analyses profiles)
and free of any popliner type but the memory components, so that a solver's
result can build its own frame
(:meth:`popliner.solvers.result.SplitResult.to_frame`) without the solver
layer depending on the analysis. Columns: ``string`` for names, ``int64``
for bytes, counts and cycles.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from popliner.memory.types import ComponentBytes, components

__all__ = ["component_columns", "typed"]


def component_columns(memories: Sequence[ComponentBytes]) -> dict[str, list[int]]:
    """The five components (and ``other`` when some figure has other categories) and their total, a column each."""
    names = components(any(m.other for m in memories))
    cols: dict[str, list[int]] = {name: [getattr(m, name) for m in memories] for name in names}
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
